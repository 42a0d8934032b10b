"""Loads the task fixtures of tests/fixtures/eval/ for the lm-eval task YAMLs beside this file.

The YAMLs name their file in `dataset_kwargs: {data_files: NAME}`; it is resolved against this file's location
rather than the working directory, so `lm_eval --include_path tests/peer/lm_eval_tasks` works from anywhere.
"""

import json
import pathlib

import datasets

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "eval"


def load(data_files, **_metadata):
    with open(FIXTURES / data_files, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    return {"test": datasets.Dataset.from_list(docs, split=datasets.Split.TEST)}


def load_text(data_files, **_metadata):
    """A plain-text fixture as one document, {"text": its whole content}."""
    text = (FIXTURES / data_files).read_text(encoding="utf-8")
    return {"test": datasets.Dataset.from_list([{"text": text}], split=datasets.Split.TEST)}

"""Writes tests/fixtures/data/: indexed datasets written by megatron-core's IndexedDatasetBuilder (the
format zaya reads and writes), with the tokens they hold as JSON so the C++ reader can be checked.

- megatron_uint16.{bin,idx}: 40 documents of one sequence each, uint16 tokens (vocab below 65500);
- megatron_int32.{bin,idx}: int32 tokens above 65535, and documents of several sequences each (Megatron's
  sentence-split layout), to check the document indices are honoured.

Run: tools/reference/.venv/bin/python tools/reference/gen_data_fixtures.py
"""

import json
import pathlib

import numpy
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "data"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = numpy.random.default_rng(5)
    expected = {}

    builder = IndexedDatasetBuilder(str(OUT / "megatron_uint16.bin"), dtype=numpy.uint16)
    documents = []
    for _ in range(40):
        doc = rng.integers(0, 65000, size=int(rng.integers(1, 60))).tolist()
        builder.add_item(torch.tensor(doc, dtype=torch.int64))
        builder.end_document()
        documents.append([doc])
    builder.finalize(str(OUT / "megatron_uint16.idx"))
    expected["megatron_uint16"] = documents

    builder = IndexedDatasetBuilder(str(OUT / "megatron_int32.bin"), dtype=numpy.int32)
    documents = []
    for _ in range(12):
        sentences = [rng.integers(0, 200000, size=int(rng.integers(1, 20))).tolist()
                     for _ in range(int(rng.integers(1, 4)))]
        for sentence in sentences:
            builder.add_item(torch.tensor(sentence, dtype=torch.int64))
        builder.end_document()
        documents.append(sentences)
    builder.finalize(str(OUT / "megatron_int32.idx"))
    expected["megatron_int32"] = documents

    (OUT / "megatron_expected.json").write_text(json.dumps(expected) + "\n")


if __name__ == "__main__":
    main()

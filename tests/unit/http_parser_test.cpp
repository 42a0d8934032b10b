// zaya serve's HTTP/1.1 request parser: requests split at every byte, pipelined requests one at a time,
// and every refusal (head too large, a malformed request line or header, Content-Length errors, chunked
// bodies) with its status.

#include <gtest/gtest.h>

#include <string>

#include "serve/http_parser.h"
#include "serve/http_response.h"

namespace zaya {
namespace {

using State = HttpParse::State;

const std::string kPost =
    "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
    "Content-Length: 14\r\n\r\n{\"prompt\":\"a\"}";

HttpParse parse(const std::string& bytes, HttpRequest& out, HttpLimits limits = {}) {
  return parse_http_request(bytes, limits, out);
}

std::pair<int, State> refusal(const std::string& bytes, HttpLimits limits = {}) {
  HttpRequest request;
  const HttpParse result = parse(bytes, request, limits);
  return {result.status, result.state};
}

TEST(HttpParser, ReadsARequest) {
  HttpRequest request;
  const HttpParse result = parse(kPost, request);
  ASSERT_EQ(result.state, State::Complete) << result.message;
  EXPECT_EQ(result.consumed, kPost.size());
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.target, "/v1/completions?x=1");
  EXPECT_EQ(request.path, "/v1/completions");
  EXPECT_EQ(request.minor_version, 1);
  ASSERT_NE(request.header("content-type"), nullptr);
  EXPECT_EQ(*request.header("content-type"), "application/json");
  EXPECT_EQ(request.body, "{\"prompt\":\"a\"}");
  EXPECT_TRUE(request.keep_alive);
  EXPECT_FALSE(request.expect_continue);
}

TEST(HttpParser, SplitAtEveryByte) {
  // However the bytes arrive, a prefix is incomplete (the head, then the body) and the whole is the request.
  const size_t head = kPost.find("\r\n\r\n") + 4;
  for (size_t cut = 0; cut < kPost.size(); ++cut) {
    HttpRequest request;
    const HttpParse part = parse(kPost.substr(0, cut), request);
    EXPECT_EQ(part.state, cut < head ? State::Head : State::Body) << "cut at " << cut;
    if (part.state == State::Body) {
      EXPECT_EQ(part.consumed, kPost.size());
    }
  }
  HttpRequest request;
  EXPECT_EQ(parse(kPost, request).state, State::Complete);
  EXPECT_EQ(request.body, "{\"prompt\":\"a\"}");
}

TEST(HttpParser, PipelinedRequestsOneAtATime) {
  const std::string get = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  std::string bytes = get + kPost + get + "GET /metr";
  std::vector<std::string> paths;
  for (;;) {
    HttpRequest request;
    const HttpParse result = parse(bytes, request);
    if (result.state != State::Complete) {
      EXPECT_EQ(result.state, State::Head);
      break;
    }
    paths.push_back(request.path);
    bytes.erase(0, result.consumed);
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/health", "/v1/completions", "/health"}));
  EXPECT_EQ(bytes, "GET /metr");
}

TEST(HttpParser, ConnectionAndExpect) {
  HttpRequest request;
  ASSERT_EQ(parse("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", request).state, State::Complete);
  EXPECT_FALSE(request.keep_alive);
  ASSERT_EQ(parse("GET / HTTP/1.0\r\n\r\n", request).state, State::Complete);
  EXPECT_FALSE(request.keep_alive);
  EXPECT_EQ(request.minor_version, 0);
  ASSERT_EQ(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", request).state, State::Complete);
  EXPECT_TRUE(request.keep_alive);
  const HttpParse waiting =
      parse("POST /tokenize HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", request);
  EXPECT_EQ(waiting.state, State::Body);
  EXPECT_TRUE(request.expect_continue);
  // Empty lines before a request are ignored.
  ASSERT_EQ(parse("\r\n\r\nGET /health HTTP/1.1\r\n\r\n", request).state, State::Complete);
  EXPECT_EQ(request.path, "/health");
}

TEST(HttpParser, OversizeHead) {
  HttpLimits limits;
  limits.max_header_bytes = 1024;
  const std::string big = "GET / HTTP/1.1\r\nX-Pad: " + std::string(1100, 'a');
  // Refused as soon as the bound is passed, without waiting for the head's end.
  EXPECT_EQ(refusal(big, limits), std::make_pair(431, State::Invalid));
  EXPECT_EQ(refusal(big + "\r\n\r\n", limits), std::make_pair(431, State::Invalid));
  const std::string fits = "GET / HTTP/1.1\r\nX-Pad: " + std::string(900, 'a') + "\r\n\r\n";
  EXPECT_EQ(refusal(fits, limits).second, State::Complete);
}

TEST(HttpParser, BadRequestLine) {
  for (const std::string line :
       {"GET\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/1.1 x\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n",
        "G(T / HTTP/1.1\r\n\r\n", "GET nopath HTTP/1.1\r\n\r\n", "GET / HTTX/1.1\r\n\r\n",
        "GET / HTTP/1.10\r\n\r\n", "GET /a\x01 HTTP/1.1\r\n\r\n"})
    EXPECT_EQ(refusal(line), std::make_pair(400, State::Invalid)) << line;
  EXPECT_EQ(refusal("GET / HTTP/2.0\r\n\r\n"), std::make_pair(505, State::Invalid));
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nNo colon\r\n\r\n"), std::make_pair(400, State::Invalid));
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nName : v\r\n\r\n"), std::make_pair(400, State::Invalid));
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n"), std::make_pair(400, State::Invalid));
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n"), std::make_pair(400, State::Invalid));
}

TEST(HttpParser, ContentLengthErrors) {
  const std::string head = "POST /tokenize HTTP/1.1\r\n";
  for (const std::string length : {"-1", "1 2", "abc", "0x10", "+5", "", "99999999999999999999"})
    EXPECT_EQ(refusal(head + "Content-Length: " + length + "\r\n\r\n"), std::make_pair(400, State::Invalid))
        << length;
  EXPECT_EQ(refusal(head + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
            std::make_pair(400, State::Invalid));
  EXPECT_EQ(refusal(head + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc").second, State::Complete);
  HttpLimits limits;
  limits.max_body_bytes = 100;
  // Too large is known from the head: refused before any of the body is read.
  EXPECT_EQ(refusal(head + "Content-Length: 101\r\n\r\n", limits), std::make_pair(413, State::Invalid));
  EXPECT_EQ(refusal(head + "Content-Length: 100\r\n\r\n", limits).second, State::Body);
  EXPECT_EQ(refusal(head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
            std::make_pair(411, State::Invalid));
  EXPECT_EQ(refusal(head + "Expect: something\r\n\r\n"), std::make_pair(417, State::Invalid));
}

TEST(HttpResponse, WholeAndChunked) {
  std::string out;
  ResponseWriter whole(out, 1, true);
  whole.whole(404, "application/json", "{}");
  EXPECT_EQ(out,
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: "
            "keep-alive\r\n\r\n{}");
  out.clear();
  ResponseWriter stream(out, 1, true);
  stream.begin_stream(200, "text/event-stream");
  stream.chunk("data: x\n\n");
  stream.chunk("");
  stream.end_stream();
  EXPECT_NE(out.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_TRUE(out.ends_with("\r\n\r\n9\r\ndata: x\n\n\r\n0\r\n\r\n")) << out;
  out.clear();
  ResponseWriter old(out, 0, true);  // HTTP/1.0: no chunks; the connection's end ends the body
  old.begin_stream(200, "text/event-stream");
  old.chunk("data: x\n\n");
  EXPECT_FALSE(old.keep_alive());
  EXPECT_TRUE(out.ends_with("Connection: close\r\n\r\ndata: x\n\n")) << out;
}

}  // namespace
}  // namespace zaya

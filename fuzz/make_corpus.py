#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ from the test fixtures (tests/fixtures/),
the YAML in the unit tests, README, docs/ and config/, and a few hand-written inputs.

Run it again after changing a fixture or a target's input layout (the control bytes a
target reads first, see each fuzz/<target>.cpp); it rewrites fuzz/corpus/ whole.
A developer tool only: the committed corpus is what CI replays.
"""
import json
import pathlib
import re
import shutil
import struct
import zlib

root = pathlib.Path(__file__).resolve().parent.parent
fixtures = root / "tests" / "fixtures"
out_root = root / "fuzz" / "corpus"


def fixture(path):
    return (fixtures / path).read_bytes()


def write(target, name, data):
    d = out_root / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def u16(n):
    return struct.pack(">H", n)


# --- AWS event-stream encoding (the format of src/aws/event_stream.h) ---------------------
def es_header(name, type_, value=b""):
    n = name.encode()
    h = bytes([len(n)]) + n + bytes([type_])
    if type_ in (6, 7):
        return h + u16(len(value)) + value
    return h + value


def es_message(headers, payload):
    block = b"".join(headers)
    total = 12 + len(block) + len(payload) + 4
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


def es_string_headers(d):
    return [es_header(k, 7, v.encode()) for k, v in d.items()]


def bedrock_stream():
    events = json.loads(fixture("bedrock/converse_stream.json"))
    return b"".join(
        es_message(es_string_headers(e["headers"]),
                   json.dumps(e["payload"], separators=(",", ":"), ensure_ascii=False).encode())
        for e in events)


def bedrock_exception():
    return es_message(es_string_headers({":message-type": "exception", ":exception-type": "throttlingException",
                                         ":content-type": "application/json"}),
                      b'{"message":"Too many requests, please wait before trying again."}')


# --- YAML configs --------------------------------------------------------------------------
def yaml_seeds():
    seeds = {"example": (root / "config" / "tahua.example.yaml").read_bytes()}
    default = (root / "src" / "config" / "default_config.cpp").read_text()
    seeds["default"] = re.search(r'R"yaml\((.*?)\)yaml"', default, re.S).group(1).encode()
    readme = (root / "README.md").read_text()
    for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", readme, re.S)):
        seeds[f"readme-{i}"] = block.encode()
    for page in sorted((root / "docs").glob("*.md")):
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)):
            seeds[f"docs-{page.stem}-{i}"] = block.encode()
    for test in ("config_loader_test", "routes_test", "healing_engine_test"):
        text = (root / "tests" / "unit" / f"{test}.cpp").read_text()
        for i, raw in enumerate(re.findall(r'R"\((.*?)\)"', text, re.S)):
            if re.search(r"^(listeners|providers|models|routes|healing|server):", raw, re.M):
                seeds[f"{test}-{i}"] = raw.encode()
    return seeds


def main():
    if out_root.exists():
        shutil.rmtree(out_root)

    # http_head: control (bit 0 response side, bit 1 small limits), read size, bytes.
    requests = {
        "get-healthz": b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "post-content-length": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 47\r\n\r\n" + b'{"model":"m","messages":[],"stream":true}      ',
        "post-chunked": b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                        b"anthropic-version: 2023-06-01\r\n\r\n5\r\n{\"mod\r\n9;ext=1\r\nel\":\"m\"}\r\n0\r\nTrailer: t\r\n\r\n",
        "pipelined": b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz?api-version=2024-06-01&x HTTP/1.1\r\n"
                     b"Host: x\r\nConnection: close\r\n\r\n",
        "expect-continue": b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        "http10": b"GET /metrics HTTP/1.0\r\n\r\n",
        "te-and-cl": b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "absolute-form": b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
        "folded-header": b"GET / HTTP/1.1\r\nX-A: 1\r\n  continued\r\nHost: x\r\n\r\n",
    }
    for i, (name, req) in enumerate(requests.items()):
        write("http_head", f"request-{name}", bytes([0, 255 if i % 2 else 7]) + req)
    write("http_head", "request-small-limits", bytes([0x2 | (3 << 2), 255]) + requests["post-content-length"])
    responses = {
        "json": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"x\"}\n",
        "sse-chunked": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"e\r\ndata: {\"a\":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
        "close-delimited": b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nConnection: close\r\n\r\n{\"error\":{}}",
        "no-content": b"HTTP/1.1 204 No Content\r\nX-Request-Id: abc\r\n\r\n",
    }
    for name, res in responses.items():
        write("http_head", f"response-{name}", bytes([1, 3]) + res)

    # request_inspect: control (replacement model), body.
    bodies = {
        "anthropic-chat": fixture("anthropic/chat_request.json"),
        "gemini-chat": fixture("gemini/chat_request.json"),
        "bedrock-chat": fixture("bedrock/chat_request.json"),
        "anthropic-messages": fixture("anthropic/messages_request.json"),
        "stream-usage": b'{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[]}',
        "escaped-model": b'{"messages":[],"model":"a\\"b\\u00e9\\ud83c\\udf1e" , "stream":null}',
        "model-not-string": b'{"model":42}',
        "trailing-junk": b'{"model":"m"} x',
        "duplicate-model": b'{"model":"a","stream":false,"model":"b"}',
    }
    for i, (name, body) in enumerate(bodies.items()):
        write("request_inspect", name, bytes([i]) + body)

    # sse_parser: control (bit 0: tiny size bound), split, stream.
    sse = {
        "openai-tool-calls": fixture("openai/stream_tool_calls.sse"),
        "anthropic-tool-use": fixture("anthropic/stream_tool_use.sse"),
        "gemini": fixture("gemini/stream.sse"),
        "line-ends": b"\xef\xbb\xbfevent: a\r\ndata: 1\r\ndata:2\r\rid: 7\n: comment\n\ndata\nretry: 5\nunknown: x\n\n",
        "unterminated": b"data: {\"partial\":",
    }
    for i, (name, s) in enumerate(sse.items()):
        write("sse_parser", name, bytes([0]) + u16(i * 37 + 11) + s)
    write("sse_parser", "small-bound", bytes([0x41]) + u16(5) + sse["line-ends"])

    # event_stream: control (bit 0 fix CRCs, bit 1 small limit), split, stream.
    all_types = es_message([es_header("t", 0), es_header("f", 1), es_header("b", 2, b"\xff"), es_header("s", 3, b"\x80\x00"),
                            es_header("i", 4, b"\x00\x00\x01\x00"), es_header("l", 5, b"\xff" * 8),
                            es_header("ba", 6, b"\x00\x01"), es_header("str", 7, b"text"),
                            es_header("ts", 8, struct.pack(">q", 1700000000000)), es_header("u", 9, bytes(range(16)))],
                           b"payload")
    streams = {"bedrock": bedrock_stream(), "exception": bedrock_exception(), "all-header-types": all_types,
               "empty-message": es_message([], b"")}
    for i, (name, s) in enumerate(streams.items()):
        write("event_stream", name, bytes([0]) + u16(i * 101 + 13) + s)
        write("event_stream", name + "-fix-crc", bytes([1]) + u16(i * 57) + s)
    write("event_stream", "small-limit", bytes([2 | (4 << 2)]) + u16(3) + streams["exception"] + all_types)

    # translate_request: control (inbound 0 openai / 1 anthropic / 2 responses, 0x10 stream,
    # 0x20 small max_tokens, 0x40/0x80 configured model name), body.
    responses_bodies = {
        "text": b'{"model":"m","input":"hi","instructions":"be brief","stream":true}',
        "items": b'{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},'
                 b'{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},'
                 b'{"type":"function_call_output","call_id":"c1","output":"ok"}],'
                 b'"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"max_output_tokens":5}',
    }
    chats = {"openai-anthropic-chat": fixture("anthropic/chat_request.json"),
             "openai-gemini-chat": fixture("gemini/chat_request.json"),
             "openai-bedrock-chat": fixture("bedrock/chat_request.json")}
    for i, (name, body) in enumerate(chats.items()):
        write("translate_request", name, bytes([0 | (0x10 if i % 2 else 0) | (0x40 if i == 2 else 0)]) + body)
    write("translate_request", "anthropic-messages", bytes([1]) + fixture("anthropic/messages_request.json"))
    write("translate_request", "anthropic-messages-stream", bytes([1 | 0x10 | 0xC0]) + fixture("anthropic/messages_request.json"))
    for name, body in responses_bodies.items():
        write("translate_request", f"responses-{name}", bytes([2]) + body)

    # translate_stream: control (vendor 0 openai / 1 anthropic / 2 gemini / 3 bedrock,
    # client API in bits 2-3, 0x10 include_usage, 0x20 fix Bedrock CRCs), split, body.
    vendor_streams = [(0, "openai", fixture("openai/stream_tool_calls.sse")),
                      (1, "anthropic", fixture("anthropic/stream_tool_use.sse")),
                      (2, "gemini", fixture("gemini/stream.sse")),
                      (3, "bedrock", bedrock_stream()),
                      (3, "bedrock-exception", bedrock_exception()),
                      (1, "anthropic-error", b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'),
                      (0, "openai-truncated", fixture("openai/stream_tool_calls.sse")[:700])]
    for vendor, name, body in vendor_streams:
        for client in range(3):
            control = vendor | (client << 2) | (0x10 if client == 0 else 0) | (0x20 if vendor == 3 and client == 1 else 0)
            write("translate_stream", f"{name}-to-{['openai', 'anthropic', 'responses'][client]}",
                  bytes([control]) + u16(client * 211 + 5) + body)

    # translate_response: control (vendor, client API in bits 2-3, status index in bits 4-7), body.
    vendor_bodies = [(0, "openai", b'{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,'
                                   b'"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":'
                                   b'"function","function":{"name":"f","arguments":"{\\"a\\":1}"}}]},"finish_reason":'
                                   b'"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7,'
                                   b'"prompt_tokens_details":{"cached_tokens":2}}}'),
                     (0, "openai-error", b'{"error":{"message":"m","type":"invalid_request_error","param":"x","code":"c"}}'),
                     (1, "anthropic", fixture("anthropic/response_tool_use.json")),
                     (1, "anthropic-error", b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'),
                     (2, "gemini-text", fixture("gemini/response_text.json")),
                     (2, "gemini-function-call", fixture("gemini/response_function_call.json")),
                     (2, "gemini-error", b'{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}'),
                     (3, "bedrock-text", fixture("bedrock/converse_response_text.json")),
                     (3, "bedrock-tool-use", fixture("bedrock/converse_response_tool_use.json")),
                     (3, "bedrock-error", b'{"message":"The security token included in the request is invalid."}')]
    for i, (vendor, name, body) in enumerate(vendor_bodies):
        client = i % 3
        write("translate_response", name, bytes([vendor | (client << 2) | ((i % 14) << 4)]) + body)

    # stored_state: control (part in bits 0-1, the form a hit asks for in bits 2-4), text.
    entry_head = (b'{"v":1,"e":1,"s":true,"u":true,"st":200,"ct":"text/event-stream","pt":3,"ctk":2,"cch":0,'
                  b'"t":"team-a","k":"","m":"gpt","x":99,"f":50}\n')
    write("stored_state", "entry-chat-stream", bytes([0 | (1 << 2)]) + entry_head + fixture("openai/stream_tool_calls.sse"))
    write("stored_state", "entry-messages-stream",
          bytes([0 | 0x10]) + entry_head.replace(b'"e":1', b'"e":6') + fixture("anthropic/stream_tool_use.sse"))
    write("stored_state", "entry-responses-whole",
          bytes([0 | (2 << 2) | 0x10]) + entry_head.replace(b'"e":1,"s":true', b'"e":5,"s":false') +
          b'{"id":"resp_x","object":"response","status":"completed","output":[{"type":"message","content":'
          b'[{"type":"output_text","text":"hi"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}')
    write("stored_state", "entry-bad-header", bytes([0]) + b'{"v":1,"e":"x"}\nbody')
    write("stored_state", "record",
          bytes([1]) + b'{"response":{"id":"resp_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","output":[{"type":"message","id":"m",'
          b'"content":[{"type":"output_text","text":"r"}]}]},"input":[{"type":"message","role":"user","content":"q"},'
          b'{"type":"function_call_output","call_id":"c","output":"o"}],"context":["BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"]}')
    write("stored_state", "record-odd-shapes", bytes([1]) + b'{"response":{"output":"x"},"input":[1,null,"s"],"context":[2]}')
    write("stored_state", "canonical", bytes([2]) + b'{"b":[1,1.0,1e2,-0.0,0.1,1e300,"\\u00e9"],"a":{"z":null,"y":true}}')

    # guardrail_stream: control (client API: 0 chat, 1 completions, 2 Responses, 3 Anthropic),
    # two splits, the stream as the client would get it.
    def chat_event(content, index=0, finish=None):
        delta = {} if content is None else {"content": content}
        return b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [
            {"index": index, "delta": delta, "finish_reason": finish}]}).encode() + b"\n\n"
    card_chat = (chat_event("Card 4111 1111") + chat_event(" 1111 1111, mail bob@exa") + chat_event("mple.org ok") +
                 chat_event("second choice tahua", index=1) + chat_event(None, finish="stop") + b"data: [DONE]\n\n")
    write("guardrail_stream", "chat-card-email", bytes([0]) + u16(20) + u16(300) + card_chat)
    write("guardrail_stream", "chat-block", bytes([0]) + u16(7) + u16(90) + chat_event("it is forbid") + chat_event("den now"))
    write("guardrail_stream", "chat-tool-calls", bytes([0]) + u16(100) + u16(400) + fixture("openai/stream_tool_calls.sse"))
    write("guardrail_stream", "anthropic-tool-use", bytes([3]) + u16(50) + u16(600) + fixture("anthropic/stream_tool_use.sse"))
    def anth_delta(text, index=0):
        return (b"event: content_block_delta\ndata: " + json.dumps({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": text}}).encode() + b"\n\n")
    write("guardrail_stream", "anthropic-card", bytes([3]) + u16(30) + u16(120) + anth_delta("pay 4111-1111-") +
          anth_delta("1111-1111 now") + b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n')
    def resp_event(obj):
        return b"event: " + obj["type"].encode() + b"\ndata: " + json.dumps(obj).encode() + b"\n\n"
    full = "mail ann@example.com"
    write("guardrail_stream", "responses-done", bytes([2]) + u16(40) + u16(200) +
          resp_event({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "mail ann@"}) +
          resp_event({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "example.com"}) +
          resp_event({"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": full}) +
          resp_event({"type": "response.completed", "response": {"output": [{"type": "message", "content": [
              {"type": "output_text", "text": full}]}]}}))
    write("guardrail_stream", "completions-crlf", bytes([1]) + u16(3) + u16(33) +
          b'data: {"choices":[{"index":0,"text":"x 4111111111111111"}]}\r\n\r\ndata: {"choices":[{"index":0,"text":" y"}]}\r\n\r\n')

    # config_loader: the YAML text.
    for name, text in yaml_seeds().items():
        write("config_loader", name, text)


if __name__ == "__main__":
    main()

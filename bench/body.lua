-- wrk script for bench/run.sh translation: chat.lua (headers, BENCH result line) with the
-- body taken from BENCH_BODY, so one script serves OpenAI and Anthropic bodies alike; the
-- path is the one in wrk's URL. chat.lua stays as it is, so proxy mode sends the same bytes.
-- Still no request()/response() hooks: wrk builds the request once.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(dir .. "chat.lua")
local body = os.getenv("BENCH_BODY")
assert(body and body ~= "", "bench/body.lua: BENCH_BODY is not set")
wrk.body = body
-- BENCH_AUTH: an Authorization header (bench/limits.sh), sent with every request.
local auth = os.getenv("BENCH_AUTH")
if auth and auth ~= "" then wrk.headers["Authorization"] = auth end

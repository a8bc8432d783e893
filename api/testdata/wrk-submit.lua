-- wrk script for the durable-submission benchmark: every request is a
-- POST /v1/jobs with its own Idempotency-Key, so every 202 is a new job
-- committed to the database (a replay would not measure durability).
--
--   EDGEPIPE_TOKEN=<tenant token> wrk -t4 -c64 -d30s --latency \
--     -s api/testdata/wrk-submit.lua http://127.0.0.1:8080
--
-- Keys are <run>-<thread>-<counter>: the run part (time and a random number)
-- keeps two runs against one database from replaying each other's keys.
-- At the end it prints how many answers were 202 and how many were not;
-- "non_202=0" is part of a valid result. Against api.BareHandler() the same
-- script measures the framework without any durability.

local token = os.getenv("EDGEPIPE_TOKEN") or "bench-token-0123456789"
math.randomseed(os.time())
local run = string.format("%x-%x", os.time(), math.random(0, 0x7fffffff))

local body = [[{"operation":"render_video","title":"bench","scenes":[{"image_prompt":"a lighthouse at dusk","narration":"every night the keeper climbed the stairs","duration_ms":2000},{"video_prompt":"waves against rocks","narration":"and the sea answered","duration_ms":1500}],"options":{"resolution":"640x360","fps":25}}]]

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  accepted = 0
  other = 0
  prefix = run .. "-" .. tostring(tid) .. "-"
end

function request()
  counter = counter + 1
  local headers = {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. counter,
  }
  return wrk.format("POST", "/v1/jobs", headers, body)
end

function response(status, headers, body)
  if status == 202 then
    accepted = accepted + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local a, o = 0, 0
  for _, t in ipairs(threads) do
    a = a + t:get("accepted")
    o = o + t:get("other")
  end
  io.write(string.format("accepted_202=%d non_202=%d accepted_per_sec=%.1f\n",
    a, o, a / (summary.duration / 1e6)))
end

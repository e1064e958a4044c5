-- wrk: POST a batch of TOKI_BATCH schedules per request (each 2 participants x
-- 2 channels = 4 deliveries), every schedule with its own id.
local tenant = os.getenv("TOKI_TENANT")
local key = os.getenv("TOKI_API_KEY")
local starts_at = os.getenv("TOKI_STARTS_AT")
local size = tonumber(os.getenv("TOKI_BATCH") or "100")
local threads = 0
local counter = 0
local tag = 0

function setup(thread)
  threads = threads + 1
  thread:set("tag", threads)
end

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. key
  wrk.headers["Content-Type"] = "application/json"
end

local item = [[{"id":"%s","title":"Stand-up","body":"Agenda","starts_at":"%s","time_zone":"Asia/Tokyo","participants":["user0","user1"],"reminders":[{"minutes_before":5,"channels":["slack","chat"]}]}]]
local path = string.format("/v1/tenants/%s/schedules:batch", tenant)

function request()
  local items = {}
  for i = 1, size do
    counter = counter + 1
    items[i] = string.format(item, string.format("b%d-%d", tag, counter), starts_at)
  end
  return wrk.format("POST", path, nil, '{"schedules":[' .. table.concat(items, ",") .. ']}')
end

function done(summary, latency, requests)
  io.write(string.format("schedules/s: %.0f\n", summary.requests / (summary.duration / 1e6) * size))
end

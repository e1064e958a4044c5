-- wrk: PUT one schedule per request (2 participants x 2 channels = 4 deliveries),
-- each with its own id. The tenant, key and start come from the environment
-- (set by scripts/register_load.sh).
local tenant = os.getenv("TOKI_TENANT")
local key = os.getenv("TOKI_API_KEY")
local starts_at = os.getenv("TOKI_STARTS_AT")
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

local body = string.format([[{"title":"Stand-up","body":"Agenda","starts_at":"%s","time_zone":"Asia/Tokyo","participants":["user0","user1"],"reminders":[{"minutes_before":5,"channels":["slack","chat"]}]}]], starts_at)

function request()
  counter = counter + 1
  local path = string.format("/v1/tenants/%s/schedules/w%d-%d", tenant, tag, counter)
  return wrk.format("PUT", path, nil, body)
end

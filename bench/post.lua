-- wrk script for bench/run.py: POST one JSON body (BENCH_BODY), optional Authorization (BENCH_AUTH),
-- and print the figures as one JSON line when done (latencies in microseconds).
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("BENCH_AUTH")
if auth ~= nil and auth ~= "" then
  wrk.headers["Authorization"] = auth
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"timeouts":%d,"non_2xx":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end

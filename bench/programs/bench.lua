-- bench.lua: an interpreter workload for bench/run (run by lua_bench).
-- Recursion, closures, tables, strings, string.format, gsub and sort: the
-- interpreter's VM, GC, table and string code all take part. Deterministic.
local scale = tonumber((...)) or 1

local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function words(n)
  local t = {}
  for i = 1, n do
    t[#t + 1] = string.format("w%05d", (i * 7919) % 10007)
  end
  return t
end

local function count_chars(s)
  local counts = {}
  for c in s:gmatch(".") do counts[c] = (counts[c] or 0) + 1 end
  return counts
end

local acc = 0
for round = 1, scale do
  acc = acc + fib(20)
  local w = words(4000)
  table.sort(w)
  local joined = table.concat(w, " ")
  local up = joined:gsub("w(%d)", function(d) return "W" .. d end)
  local cc = count_chars(up:sub(1, 20000))
  acc = acc + #up + (cc["W"] or 0)
  local objs = {}
  for i = 1, 3000 do objs[i] = setmetatable({v = i}, {__index = function(_, k) return k end}) end
  for i = 1, 3000 do acc = acc + objs[i].v + #objs[i].missing end
end
print(acc)

function main(rt)
  local cache = {}
  while true do
    cache[#cache + 1] = string.rep("x", 1024 * 1024) .. #cache
  end
end

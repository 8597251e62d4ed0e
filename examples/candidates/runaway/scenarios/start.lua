function main(rt)
  rt:emit{ type = "ping", payload = { n = 1 } }
  rt:run_until_idle()
end

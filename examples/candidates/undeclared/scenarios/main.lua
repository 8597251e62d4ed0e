function main(rt)
  rt:run_until_idle()
end

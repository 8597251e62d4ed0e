-- Drives one goal through the greeter and checks that a greeting appeared.
function main(rt)
  rt:run_goal("water the plants")
  rt:run_until_idle()
  local greetings = rt.graph:objects("greeting")
  assert(#greetings == 1, "expected one greeting, got " .. #greetings)
end

-- greeter: answers every new goal with a greeting object.
local pack = forktrial.pack{
  name = "greeter",
  version = "0.1.0",
  object_types = { "greeting" },
  relation_types = {},
  tools = {},
  settings_schema = "",
  capabilities = {
    { provider = "greeter", capability = "write_greeting", risk_class = "low" },
  },
}

pack:behavior{
  name = "greeter",
  on = { "goal.created" },
  run = function(event, graph, ctx)
    local id = graph:add_object("greeting", { text = "Hello, " .. event.payload.goal .. "!" })
    ctx.log("greeted goal " .. event.id .. " as " .. id)
  end,
}

return pack

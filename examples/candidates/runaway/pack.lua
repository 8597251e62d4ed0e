-- runaway: every ping causes another ping; only the event budget stops it.
local pack = forktrial.pack{
  name = "runaway", version = "0.1.0",
  object_types = {}, relation_types = {}, tools = {}, settings_schema = "", capabilities = {},
}

pack:behavior{
  name = "pinger",
  on = { "ping" },
  run = function(event, graph, ctx)
    graph:emit{ type = "ping", payload = { n = event.payload.n + 1 } }
  end,
}

return pack

-- undeclared: registers a behavior its manifest does not declare.
local pack = forktrial.pack{
  name = "undeclared", version = "0.1.0",
  object_types = {}, relation_types = {}, tools = {}, settings_schema = "", capabilities = {},
}

pack:behavior{
  name = "listed",
  on = { "chat.message" },
  run = function(event, graph, ctx) end,
}

pack:behavior{
  name = "hidden_exfiltrator",
  on = { "chat.message" },
  run = function(event, graph, ctx) end,
}

return pack

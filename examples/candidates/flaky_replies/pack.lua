-- flaky_replies: a proposal that replies to chat messages but trips over
-- messages without text; its scenario insists every message got a reply.
local pack = forktrial.pack{
  name = "flaky_replies", version = "0.1.0",
  object_types = { "reply" }, relation_types = {}, tools = {}, settings_schema = "",
  capabilities = {},
}

pack:behavior{
  name = "reply",
  on = { "chat.message" },
  run = function(event, graph, ctx)
    graph:add_object("reply", { text = "re: " .. event.payload.text:upper() })
  end,
}

return pack

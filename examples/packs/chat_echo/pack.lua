-- chat_echo: replies to every chat message, linking the reply to a thread.
local replies = require("replies")

local pack = forktrial.pack{
  name = "chat_echo",
  version = "0.2.0",
  object_types = { "thread", "reply" },
  relation_types = { "in_thread" },
  tools = {},
  settings_schema = "",
  capabilities = {
    { provider = "chat_echo", capability = "write_reply", risk_class = "low" },
  },
}

pack:behavior{
  name = "echo",
  on = { "chat.message" },
  run = function(event, graph, ctx)
    local threads = graph:objects("thread")
    local thread = threads[1] and threads[1].id or graph:add_object("thread", { topic = "chat" })
    local reply = graph:add_object("reply", { text = replies.echo(event.payload.text) })
    graph:add_relation(reply, thread, "in_thread", {})
  end,
}

return pack

-- chat_echo: replies to every chat message, linking the reply to a thread,
-- and lets the chat retitle the thread with "/topic NAME" (a patch that is
-- proposed, then applied, or rejected when NAME is empty).
local replies = require("replies")

local pack = forktrial.pack{
  name = "chat_echo",
  version = "0.3.0",
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
    local text = event.payload.text
    local threads = graph:objects("thread")
    local thread = threads[1] and threads[1].id or graph:add_object("thread", { topic = "chat" })
    local topic = replies.topic_command(text)
    if topic then
      local patch = graph:propose_patch(thread, "update", { topic = topic },
        { rationale = "asked for in the chat" })
      if topic == "" then
        graph:reject_patch(patch, "a topic cannot be empty")
      else
        graph:apply_patch(patch)
      end
      return
    end
    local reply = graph:add_object("reply", { text = replies.echo(text) })
    graph:add_relation(reply, thread, "in_thread", {})
  end,
}

return pack

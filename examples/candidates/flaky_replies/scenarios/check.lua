-- Replays the recorded messages plus one without text, then checks that
-- every one of them got a reply.
function main(rt)
  local before = #rt.graph:objects("reply")
  local messages = rt:events("chat.message")
  for _, message in ipairs(messages) do
    rt:emit{ type = "chat.message", payload = message.payload, actor = "trial.replay" }
  end
  rt:emit{ type = "chat.message", payload = { attachment = "photo.png" }, actor = "trial.replay" }
  rt:run_until_idle()
  local added = #rt.graph:objects("reply") - before
  if added ~= #messages + 1 then
    error("expected " .. (#messages + 1) .. " new replies, got " .. added)
  end
end

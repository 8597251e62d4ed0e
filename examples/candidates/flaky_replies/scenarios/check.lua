-- Replays the recorded messages plus one without text, then checks that
-- every one of them got a reply.
function main(rt)
  local before = #rt.graph:objects("reply")
  for _, message in ipairs(rt:events("chat.message")) do
    rt:emit{ type = "chat.message", payload = message.payload, actor = "trial.replay" }
  end
  rt:emit{ type = "chat.message", payload = { attachment = "photo.png" }, actor = "trial.replay" }
  rt:run_until_idle()
  local added = #rt.graph:objects("reply") - before
  if added ~= 4 then
    error("expected 4 new replies, got " .. added)
  end
end

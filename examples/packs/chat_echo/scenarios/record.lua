-- The session examples/runs/chat.jsonl records (examples/runs/record):
-- a user's chat messages, each handled until the runtime is idle again.
function main(rt)
  local messages = {
    { text = "hello there" },
    { text = "/topic greetings" },
    { text = "/topic" },
    { attachment = "photo.png" },
    { text = "bye" },
  }
  for _, message in ipairs(messages) do
    rt:emit{ type = "chat.message", payload = message, actor = "user" }
    rt:run_until_idle()
  end
end

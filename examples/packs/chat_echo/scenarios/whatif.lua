-- The what-if examples/runs/chat-whatif.jsonl records (examples/runs/record):
-- the session forked after its first reply, taking another turn.
function main(rt)
  for _, message in ipairs({ { text = "/topic weather" }, { text = "will it rain?" } }) do
    rt:emit{ type = "chat.message", payload = message, actor = "user" }
    rt:run_until_idle()
  end
end

-- Re-emits each recorded chat message of the fork as a fresh event and drains.
function main(rt)
  for _, message in ipairs(rt:events("chat.message")) do
    rt:emit{ type = "chat.message", payload = message.payload, actor = "trial.replay" }
  end
  rt:run_until_idle()
end

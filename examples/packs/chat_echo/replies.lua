-- Pure helpers for chat_echo, loaded through the pack-confined require.
local replies = {}

function replies.echo(text)
  return "you said: " .. tostring(text)
end

return replies

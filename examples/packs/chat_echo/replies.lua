-- Pure helpers for chat_echo, loaded through the pack-confined require.
local replies = {}

function replies.echo(text)
  return "you said: " .. tostring(text)
end

-- "/topic NAME" -> NAME (trimmed, possibly empty); anything else -> nil.
-- A message without text is a mistake this version does not guard against.
function replies.topic_command(text)
  local rest = text:match("^/topic(.*)$")
  if rest == nil then return nil end
  return (rest:gsub("^%s+", ""):gsub("%s+$", ""))
end

return replies

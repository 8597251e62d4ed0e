-- memory_hog: caches every message forever, a megabyte at a time.
local pack = forktrial.pack{
  name = "memory_hog", version = "0.1.0",
  object_types = {}, relation_types = {}, tools = {}, settings_schema = "", capabilities = {},
}
return pack

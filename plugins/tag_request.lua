-- Tags the upstream request with the caller and fills in OpenAI's `user` field.
local plugin = {}

function plugin.on_request(req)
  local who = req.tenant or "anonymous"
  req:set_header("x-gateway-tenant", who)
  if req.api == "openai" and req:field("user") == nil then
    req:set_field("user", who .. "/" .. (req.key or "-"))
  end
end

function plugin.on_response_headers(resp)
  resp:set_header("x-tagged-by", "tag-request/1.0.0")
end

return plugin

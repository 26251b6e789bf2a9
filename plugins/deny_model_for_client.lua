-- Refuses large models to mobile clients, with a 403 in the client's API shape.
local blocked = { mobile = true, watch = true }

local plugin = {}

function plugin.on_request(req)
  local client = string.lower(req:header("x-client-type") or "")
  if blocked[client] then
    tahua.count("denied_" .. client)
    req:deny(403, "Model " .. req.model .. " is not available to " .. client .. " clients.", "model_not_allowed_for_client")
  end
end

return plugin

-- An auth link for a custom header scheme (the seed's X-Client-Type example): mobile apps
-- send `X-Client-Type: mobile` with a device token, web front ends `X-Client-Type: web`
-- with a session id. Each client type is a tenant of its own, and a key of that tenant
-- (whose models and limits then apply). A request without X-Client-Type is not this
-- link's to decide: the next link of the chain (the API key check) does.
local clients = {
  mobile = { header = "x-device-token", pattern = "^dev_%w+$", tenant = "mobile-apps", key = "mobile-app" },
  web = { header = "x-session", pattern = "^sess_%w+$", tenant = "web-apps", key = "web-frontend" },
}

local plugin = {}

function plugin.on_auth(req)
  local kind = req:header("x-client-type")
  if not kind then return end
  local client = clients[string.lower(kind)]
  if not client then
    req:deny(401, "Unknown client type '" .. kind .. "'.", "invalid_client_type")
    return
  end
  local token = req:header(client.header)
  if not token or not string.find(token, client.pattern) then
    req:deny(401, "Send a valid " .. client.header .. " header with X-Client-Type: " .. string.lower(kind) .. ".",
      "invalid_client_token")
    return
  end
  tahua.count("authenticated_" .. string.lower(kind))
  req:authenticate(client.tenant, client.key)
end

return plugin

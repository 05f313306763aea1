# The identity opsgate-gateway signed, for Ruby (any Rack app: Rails,
# Sinatra, ...): {agent:, user:, account:} when the headers carry a valid
# signature made within 5 minutes, else nil. key is the text of the
# variable the gateway's identity_key_env names.
require "openssl"
require "rack/utils"

def opsgate_identity(env, key)
  h = ->(name) { env["HTTP_X_OPSGATE_#{name}"].to_s }
  ts = h.("TIMESTAMP")
  return nil unless ts.match?(/\A\d+\z/) && (Time.now.to_i - ts.to_i).abs <= 300
  method = env["rack.methodoverride.original_method"] || env["REQUEST_METHOD"]
  path = env["SCRIPT_NAME"].to_s + env["PATH_INFO"].to_s
  signed = ["v1", ts, method, path, h.("AGENT"), h.("USER"), h.("ACCOUNT")].join("\n")
  want = "v1=" + OpenSSL::HMAC.hexdigest("SHA256", key, signed)
  return nil unless Rack::Utils.secure_compare(want, h.("SIGNATURE")) && !h.("AGENT").empty?
  { agent: h.("AGENT"), user: h.("USER"), account: (h.("ACCOUNT") unless h.("ACCOUNT").empty?) }
end

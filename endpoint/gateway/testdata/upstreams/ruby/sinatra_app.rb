# A Sinatra website on Rack (WEBrick) with Rack::MethodOverride (a form's
# _method, the X-HTTP-Method-Override header), as Rails has by default:
# the gateway's tests run it behind opsgate-gateway and read what it
# performed from GET /__performed.
#
#   ruby sinatra_app.rb   (prints its port; OPSGATE_IDENTITY_KEY: the secret)
require "json"
require "logger"
require "webrick"
require "sinatra/base"
require "rack/handler/webrick"
require_relative "opsgate_identity"

KEY = ENV.fetch("OPSGATE_IDENTITY_KEY")
PERFORMED = []
LOCK = Mutex.new

class Shop < Sinatra::Base
  set :method_override, true
  set :show_exceptions, false
  set :host_authorization, { permitted_hosts: [] } if respond_to?(:host_authorization)
  disable :protection

  helpers do
    def record(action, fields = {})
      who = opsgate_identity(request.env, KEY)
      LOCK.synchronize do
        PERFORMED << { action: action, **fields, method: request.request_method, path: request.fullpath,
                       account: who && who[:account], claimed_account: request.env["HTTP_X_OPSGATE_ACCOUNT"] }
      end
      content_type :json
      { done: action, **fields }.to_json
    end
  end

  post "/orders/:order/exchange" do
    halt 422, { error: "size is required" }.to_json if params["size"].to_s.empty?
    record("exchange", order: params["order"], size: params["size"].to_s)
  end
  patch "/api/deliveries/:order" do
    body = JSON.parse(request.body.read) rescue {}
    halt 422, { error: "date is required" }.to_json unless body.is_a?(Hash) && !body["date"].to_s.empty?
    record("delivery", order: params["order"], date: body["date"].to_s)
  end
  delete("/api/subscriptions/:id") { record("cancel", subscription: params["id"]) }
  post("/api/subscriptions/:id") { record("renew", subscription: params["id"]) }
  post("/cart/items") { record("cart") }
  post("/newsletter") { record("newsletter") }
  get "/whoami" do
    content_type :json
    { identity: opsgate_identity(request.env, KEY), claimed_account: request.env["HTTP_X_OPSGATE_ACCOUNT"] }.to_json
  end
  get "/__performed" do
    content_type :json
    LOCK.synchronize { PERFORMED.to_json }
  end
end

# WEBrick writes a response's head and body apart: without TCP_NODELAY
# each answer waits on the client's delayed ACK.
module NoDelay
  def accept_client(svr)
    sock = super
    sock&.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
    sock
  end
end
WEBrick::GenericServer.prepend(NoDelay)

server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: (ARGV[0] || 0).to_i, DoNotReverseLookup: true,
                                 Logger: WEBrick::Log.new(File::NULL), AccessLog: [])
server.mount "/", Rack::Handler::WEBrick, Shop
puts server.config[:Port]
$stdout.flush
trap("TERM") { server.shutdown }
server.start

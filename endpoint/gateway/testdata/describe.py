# The describe URL of a website behind opsgate-gateway: it says what
# POST /api/bookings {"date": ..., "guests": ...} asks the person to approve.
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Describe(BaseHTTPRequestHandler):
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        booking = json.loads(req.get("body") or "{}")
        if not booking.get("date"):  # nothing to approve: the request goes on
            self.send_response(204)
            self.end_headers()
            return
        guests = int(booking.get("guests", 2))
        answer = json.dumps({
            "key": "booking:" + booking["date"],
            "terms": {"date": booking["date"], "guests": guests},
            "summary": f"Book a table for {guests} on {booking['date']}.",
            "lifetime": 600,  # seconds
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

port = int(sys.argv[1]) if len(sys.argv) > 1 else 8081
server = HTTPServer(("127.0.0.1", port), Describe)
print(server.server_address[1], flush=True)  # the port, when given 0
server.serve_forever()

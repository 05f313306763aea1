module github.com/opsgate/opsgate/endpoint/mcpgate

go 1.25.0

replace github.com/opsgate/opsgate => ../..

require (
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/opsgate/opsgate v0.0.0-00010101000000-000000000000
)

require (
	github.com/a-h/templ v0.3.977 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/gorilla/securecookie v1.1.2 // indirect
	github.com/gorilla/sessions v1.4.0 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	golang.org/x/oauth2 v0.35.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)

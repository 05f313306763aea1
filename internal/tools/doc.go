// Package tools holds the module of the commands the kit's development
// uses (`go tool templ`, `go tool staticcheck`), so that their
// dependencies stay out of the kit's own module. go.work at the root puts
// it in the workspace.
package tools

package redisstore

import (
	"context"
	"crypto/sha1" // names the function library after its source: not for security
	_ "embed"     // the Lua scripts
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Each step is lib.lua followed by its own file: one EVALSHA, or, once Load
// has loaded them as a Redis function library (Redis 7.0 and later), one
// FCALL: one round trip and one atomic step either way (store package
// doc). A function skips what a script does on every call before its own
// code runs (defining lib.lua's functions, about 1.5 µs of server CPU per
// step on the machine demo/load/PERFORMANCE.md measures).
var (
	//go:embed lib.lua
	libLua string
	//go:embed issue.lua
	issueLua string
	//go:embed take.lua
	takeLua string
	//go:embed record.lua
	recordLua string
	//go:embed finish.lua
	finishLua string
	//go:embed useonce.lua
	useOnceLua string
	//go:embed release.lua
	releaseLua string
	//go:embed agent.lua
	agentLua string
	//go:embed undo.lua
	undoLua string
	//go:embed start.lua
	startLua string
	//go:embed tidy.lua
	tidyLua string
	//go:embed marked.lua
	markedLua string

	issueStep   = newStep("issue", issueLua)
	takeStep    = newStep("take", takeLua)
	recordStep  = newStep("record", recordLua)
	finishStep  = newStep("finish", finishLua)
	useOnceStep = newStep("useonce", useOnceLua)
	releaseStep = newStep("release", releaseLua)
	agentStep   = newStep("agent", agentLua)
	undoStep    = newStep("undo", undoLua)
	startStep   = newStep("start", startLua)
	tidyStep    = newStep("tidy", tidyLua)
	markedStep  = newStep("marked", markedLua)

	steps = []*step{issueStep, takeStep, recordStep, finishStep, useOnceStep, releaseStep, agentStep, undoStep, startStep, tidyStep, markedStep}

	// library is every step as one Redis function library. Its name (and
	// its functions') carries a digest of the source, so that web servers
	// of two versions sharing a Redis during a rolling deploy each call
	// their own code.
	library = functionLibrary()
)

// step is one of the store's atomic steps.
type step struct {
	name   string
	body   string
	script *redis.Script
	fn     string // its function's name in library
}

func newStep(name, body string) *step {
	return &step{name: name, body: body, script: redis.NewScript(libLua + body)}
}

func functionLibrary() string {
	h := sha1.New()
	h.Write([]byte(libLua))
	for _, st := range steps {
		h.Write([]byte(st.body))
	}
	name := "opsgate_" + hex.EncodeToString(h.Sum(nil))[:12]
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString(libLua)
	for _, st := range steps {
		st.fn = name + "_" + st.name
		// The step's body is the function's: KEYS and ARGV are its
		// parameters, as they are a script's globals.
		fmt.Fprintf(&b, "\nredis.register_function(%q, function(KEYS, ARGV)\n%s\nend)\n", st.fn, st.body)
	}
	return b.String()
}

// caller runs a step: a client, a Cluster client or one connection.
type caller interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// run runs st: its function when Load loaded the library, else its script
// (EVALSHA, falling back to EVAL when the server doesn't have it).
func (s *rstore) run(ctx context.Context, c caller, st *step, keys []string, args ...any) *redis.Cmd {
	if s.pipe != nil && c == caller(s.client) {
		return s.runPiped(ctx, st, keys, args)
	}
	if s.functions.Load() {
		cmd := c.FCall(ctx, st.fn, keys, args...)
		if err := cmd.Err(); err == nil || !noFunction(err) {
			return cmd
		}
		// The server doesn't have the library (a node added since Load, or
		// FUNCTION FLUSH): the function did not run, so the script runs
		// instead.
	}
	return st.script.Run(ctx, c, keys, args...)
}

// noFunction reports an FCALL refused because the server has no such
// function: nothing ran.
func noFunction(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(err.Error(), "Function not found")
}

// loadFunctions loads the library on every master; it fails on a server
// without functions (before Redis 7.0, miniredis) or whose ACL refuses
// FUNCTION LOAD, and the store then keeps running scripts.
func (s *rstore) loadFunctions(ctx context.Context) error {
	load := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, library).Err()
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Client:
		return load(ctx, c)
	default:
		return errors.New("not a *redis.Client or *redis.ClusterClient")
	}
}

// runPiped runs st as run does, through the pipeliner.
func (s *rstore) runPiped(ctx context.Context, st *step, keys []string, args []any) *redis.Cmd {
	if s.functions.Load() {
		cmd := s.pipe.call(ctx, stepArgs("fcall", st.fn, keys, args))
		if err := cmd.Err(); err == nil || !noFunction(err) {
			return cmd
		}
	}
	cmd := s.pipe.call(ctx, stepArgs("evalsha", st.script.Hash(), keys, args))
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The server doesn't have the script: EVALSHA did not run it.
		return st.script.Eval(ctx, s.client, keys, args...)
	}
	return cmd
}

// stepArgs is a command calling a step: FCALL or EVALSHA, the function or
// script, its keys and its arguments.
func stepArgs(command, name string, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, command, name, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

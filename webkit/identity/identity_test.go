package identity

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/testclock"
)

// clock is the tests' clock (internal/testclock).
type clock = testclock.Clock

func newClock() *clock { return testclock.At(time.Now().Truncate(time.Second)) }

// agentServer serves an agent's metadata at /agent and its JWKS at /jwks.
type agentServer = agenttest.Server

func newAgentServer(t testing.TB, alg string, clk *clock) *agentServer {
	return agenttest.NewServer(t, alg, clk.Now)
}

func resolverOf(a *agentServer, clk *clock) *Resolver {
	return &Resolver{HTTPClient: a.Srv.Client(), AllowLocal: true, Clock: clk.Now}
}

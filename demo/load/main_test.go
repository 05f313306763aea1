package main

import (
	"context"
	"testing"
	"time"
)

// TestLoadToolSmall runs the load tool small on both stores, so that it
// keeps working; its own check fails the run if an approved operation is
// performed twice or not at all.
func TestLoadToolSmall(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := run(ctx, config{store: kind, servers: 3, browsers: 20, repeats: 6, ordinary: 50, workers: 8}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

package main

// -side-by-side -runs N: the whole side-by-side run N times in one
// invocation, each run's ratios beside the targets, with their minimum,
// median and maximum over the runs.

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// sideTarget is one target of the side-by-side run: the ratio it reads
// from a run's result, and its bound.
type sideTarget struct {
	name   string // as the last line names it
	what   string
	of     func(sideResult) float64
	bound  float64
	atMost bool // the ratio must be ≤ bound (else ≥)
}

// sideTargets are the targets issue 28 set, on this machine, durability
// none on both sides (PERFORMANCE.md "Targets today").
var sideTargets = []sideTarget{
	{"403/hand", "kit on Redis, 403 / hand-rolled 403", func(r sideResult) float64 { return r.r403 }, 0.9, false},
	{"repeat/hand", "kit on Redis, approved repeat / hand-rolled repeat", func(r sideResult) float64 { return r.rRepeat }, 0.7, false},
	{"approval/bare", "approval request / two bare signature checks", func(r sideResult) float64 { return r.rApproval }, 1.2, true},
	{"steps/floor", "worst store step / its floor function", func(r sideResult) float64 { return r.rSteps }, 1.5, true},
}

func (t sideTarget) met(v float64) bool {
	if t.atMost {
		return v <= t.bound
	}
	return v >= t.bound
}

func (t sideTarget) String() string {
	if t.atMost {
		return fmt.Sprintf("≤ %.1f", t.bound)
	}
	return fmt.Sprintf("≥ %.1f", t.bound)
}

// sideRunsResult is what -runs reports: each run's result and the medians
// over the runs (the last line's).
type sideRunsResult struct {
	runs    []sideResult
	medians sideResult
}

// runSideBySideRuns runs runSideBySide runs times on c (a fresh
// redis-server each time unless c.redisURL), then prints each target's
// ratio per run, their minimum, median and maximum, and whether the
// median meets it; the last line is runSideBySide's, of the medians over
// the runs.
func runSideBySideRuns(ctx context.Context, c sideConfig, runs int) (sideRunsResult, error) {
	var out sideRunsResult
	if runs < 1 {
		return out, fmt.Errorf("-runs %d: at least 1", runs)
	}
	for k := range runs {
		if runs > 1 {
			fmt.Fprintf(c.out, "\n=== run %d of %d\n", k+1, runs)
		}
		r, err := runSideBySide(ctx, c)
		if err != nil {
			return out, fmt.Errorf("run %d: %w", k+1, err)
		}
		out.runs = append(out.runs, r)
	}
	if runs == 1 {
		out.medians = out.runs[0]
		return out, nil
	}
	say := func(format string, args ...any) { fmt.Fprintf(c.out, format, args...) }
	say("\n=== %d runs: each run's ratio is the median of its rounds (to 3 places here, so that one at its bound reads as it is judged)\n", runs)
	var worst []string
	for _, r := range out.runs {
		worst = append(worst, r.worstStep)
	}
	say("the worst step of each run: %s\n", strings.Join(worst, ", "))
	var bk []string
	for _, r := range out.runs {
		bk = append(bk, fmt.Sprintf("%.2f", r.rStepsBK))
	}
	say("the worst of Record, claim and Finish against its floor with bookkeeping (not a target), each run: %s\n", strings.Join(bk, ", "))
	var head strings.Builder
	fmt.Fprintf(&head, "%-52s %-7s", "ratio", "target")
	for k := range runs {
		fmt.Fprintf(&head, " %6s", fmt.Sprintf("run %d", k+1))
	}
	say("%s  %-23s %s\n", head.String(), "min / median / max", "met (median)")
	medians := make([]float64, len(sideTargets))
	for i, t := range sideTargets {
		var v []float64
		var line strings.Builder
		fmt.Fprintf(&line, "%-52s %-7s", t.what, t.String())
		for _, r := range out.runs {
			x := t.of(r)
			v = append(v, x)
			fmt.Fprintf(&line, " %6.3f", x)
		}
		medians[i] = median(v)
		met := "no"
		if t.met(medians[i]) {
			met = "yes"
		}
		say("%s  %-23s %s\n", line.String(), fmt.Sprintf("%.3f / %.3f / %.3f", slices.Min(v), medians[i], slices.Max(v)), met)
	}
	out.medians = sideResult{r403: medians[0], rRepeat: medians[1], rApproval: medians[2], rSteps: medians[3]}
	say("side by side: 403/hand=%.2f repeat/hand=%.2f approval/bare=%.2f steps/floor=%.2f\n", medians[0], medians[1], medians[2], medians[3])
	return out, nil
}

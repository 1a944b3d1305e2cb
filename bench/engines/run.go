package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// measurement is one child process: its wall time, its CPU time (user + system: on a machine
// shared with other work, wall times of two runs differ with the load; the CPU an engine spends
// much less) and its peak RSS (the kernel's ru_maxrss).
type measurement struct {
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
	PeakRSS    int64   `json:"peakRSSBytes"`
	Uploaded   int64   `json:"uploadedBytes,omitempty"` // bytes added under the engine's prefix
	Stored     int64   `json:"storedBytes,omitempty"`   // bytes under the engine's prefix after the step
	Error      string  `json:"error,omitempty"`
}

// runChild runs name with args in env (added to the benchmark's own environment) and measures
// it. Output goes to a buffer that is returned in the error when the process fails.
func runChild(ctx context.Context, dir string, env []string, name string, args ...string) measurement {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	m := childMeasurement(cmd, start)
	if err != nil {
		tail := out.Bytes()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		m.Error = fmt.Sprintf("%s %v: %v: %s", name, args, err, tail)
	}
	return m
}

// childMeasurement is the wall time since start and the rusage of cmd, which has ended.
func childMeasurement(cmd *exec.Cmd, start time.Time) measurement {
	m := measurement{Seconds: time.Since(start).Seconds()}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			m.PeakRSS = ru.Maxrss << 10 // KiB on Linux
			m.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
	}
	return m
}

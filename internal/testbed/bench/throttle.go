package main

import (
	"bufio"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// throttleWait is one client-side throttling wait that client-go logged.
type throttleWait struct {
	delay time.Duration
	line  string
}

// client-go logs a rate-limiter wait over 1 s as `"Waited before sending request" delay="1.2s"`
// (older versions: `Waited for 1.2s due to client-side throttling`) on the provider's stderr,
// which Terraform's core log holds at WARN.
var (
	// Terraform quotes the stderr line, so the value's quotes may come escaped.
	throttleDelay  = regexp.MustCompile(`delay=\\?"([^"\\]+)\\?"`)
	throttleLegacy = regexp.MustCompile(`Waited for ([0-9.]+[a-zµ]+) due to client-side throttling`)
)

// throttleWaits finds the logged waits in a log.
func throttleWaits(r io.Reader) ([]throttleWait, error) {
	var out []throttleWait
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		var m []string
		switch {
		case strings.Contains(line, "Waited before sending request"):
			m = throttleDelay.FindStringSubmatch(line)
		case strings.Contains(line, "due to client-side throttling"):
			m = throttleLegacy.FindStringSubmatch(line)
		default:
			continue
		}
		if m == nil {
			continue
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			continue
		}
		out = append(out, throttleWait{delay: d, line: strings.TrimSpace(line)})
	}
	return out, sc.Err()
}

func throttleWaitsInFile(path string) ([]throttleWait, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return throttleWaits(f)
}

// countOver counts the waits longer than d.
func countOver(waits []throttleWait, d time.Duration) int {
	n := 0
	for _, w := range waits {
		if w.delay > d {
			n++
		}
	}
	return n
}

// Package terminal writes an apply's progress lines to the terminal Terraform runs in.
//
// Terraform starts a provider as a child process whose standard output and error it captures
// (the plugin handshake, then its own logs), so nothing a provider prints there reaches the
// user. The child keeps Terraform's session, though, and with it the controlling terminal:
// /dev/tty is the terminal the user watches, and it does not exist where nobody watches (CI,
// HCP Terraform, a cron job, `setsid`), so the lines are off there by themselves. Each line is
// one write(2) of a whole line: the terminal driver writes one write whole, so a line never
// splits one of Terraform's, which are whole lines too.
package terminal

import (
	"os"
	"strings"
	"sync"
	"unicode"
)

// Path is the controlling terminal of the process.
const Path = "/dev/tty"

// Lines writes whole lines to a terminal. It is safe for concurrent use: releases applied in
// parallel share one.
type Lines struct {
	mu  sync.Mutex
	out *os.File
}

// Open opens the controlling terminal for writing; it fails when the process has none.
func Open() (*Lines, error) {
	f, err := os.OpenFile(Path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return &Lines{out: f}, nil
}

// Line writes s as one line, in one write. Control characters in s (a newline, an escape
// sequence from a message quoting someone else's text) are replaced by spaces, so that a
// line stays one line and cannot move the cursor. A line that cannot be written is dropped:
// progress is news, and the apply goes on without it.
func (l *Lines) Line(s string) {
	if l == nil {
		return
	}
	clean := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	buf := []byte(clean + "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.out.Write(buf)
}

package terminal

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Concurrent lines arrive whole, one per write, with control characters made harmless.
func TestLinesAreWholeAndClean(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tty")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	l := &Lines{out: f}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Line(strings.Repeat("x", 100+i) + "\n\x1b[2Jend")
		}()
	}
	wg.Wait()
	_ = f.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d lines, want 50", len(lines))
	}
	for _, line := range lines {
		if !strings.HasPrefix(line, "xxxx") || !strings.HasSuffix(line, "  [2Jend") || strings.ContainsRune(line, '\x1b') {
			t.Errorf("line %q is not one whole, clean line", line)
		}
	}
	var nothing *Lines
	nothing.Line("a nil Lines writes nothing")
}

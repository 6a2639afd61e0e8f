package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
)

// Progress reports long work (a replay, a rebuild, a copy): a bar with rate and time left on
// a terminal, otherwise a plain line at every tenth of the work and at the end, for logs.
type Progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	what  string
	total int
	step  int
	last  bool
	start time.Time
}

// NewProgress starts reporting work of total units on w.
func NewProgress(w io.Writer, what string, total int) *Progress {
	p := &Progress{w: w, what: what, total: total, start: time.Now()}
	if IsTerminal(w) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("events"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
	}
	return p
}

// Set reports done units, failed of them.
func (p *Progress) Set(done, failed int) {
	if p.bar != nil {
		_ = p.bar.Set(done)
		return
	}
	step := 10
	if p.total > 0 {
		step = done * 10 / p.total
	}
	if p.last || (step <= p.step && done < p.total) {
		return
	}
	p.step, p.last = step, done >= p.total
	took := time.Since(p.start)
	line := fmt.Sprintf("%s: %d/%d (%d failed) after %s", p.what, done, p.total, failed, took.Round(time.Millisecond))
	if rate := float64(done) / took.Seconds(); done > 0 && done < p.total && rate > 0 {
		eta := time.Duration(float64(p.total-done) / rate * float64(time.Second))
		line += fmt.Sprintf(", %.0f/s, ETA %s", rate, eta.Round(time.Second))
	}
	fmt.Fprintln(p.w, line)
}

// SetTotal changes the amount of work, for work that grows while it runs (a rebuild, while
// events keep coming).
func (p *Progress) SetTotal(total int) {
	if total == p.total {
		return
	}
	p.total = total
	if p.bar != nil {
		p.bar.ChangeMax(total)
	}
}

// Finish ends the bar.
func (p *Progress) Finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// SharedWriter returns w made safe for writes from several goroutines (a log and a progress
// bar on stderr): a file as it is, anything else behind a lock.
func SharedWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// lockedWriter serializes writes to a writer that is not safe for concurrent use.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// storeLetters stores n dead letters of topic in the DLQ as the middleware writes them (group
// g, keys k0…k999, bodies of pad bytes), with asynchronous publishes: a DLQ of any size in
// seconds. first numbers the letters' original sequences.
func storeLetters(t testing.TB, js natsjs.JetStream, topic string, first, n, pad int) {
	t.Helper()
	body := []byte(`{"pad":"` + strings.Repeat("x", pad) + `"}`)
	for i := first; i < first+n; i++ {
		m := nats.NewMsg(dlq.SubjectPrefix + topic)
		seq := strconv.Itoa(i + 1)
		m.Header.Set(jetbus.HeaderMsgID, "dlq:"+jetbus.StreamName(topic)+":"+seq+":g")
		m.Header.Set(dlq.HeaderReason, dlq.ReasonPermanent)
		m.Header.Set(dlq.HeaderError, "no")
		m.Header.Set(dlq.HeaderGroup, "g")
		m.Header.Set(dlq.HeaderAttempts, "1")
		m.Header.Set(dlq.HeaderOriginalSubject, topic+".p0")
		m.Header.Set(dlq.HeaderOriginalStream, jetbus.StreamName(topic))
		m.Header.Set(dlq.HeaderOriginalSeq, seq)
		m.Header.Set(dlq.HeaderOriginalID, "ev-"+seq)
		m.Header.Set(dlq.HeaderTS, strconv.FormatInt(time.Now().UnixMilli(), 10))
		m.Header.Set(jetbus.HeaderKey, "k"+strconv.Itoa(i%1000))
		m.Data = body
		_, err := js.PublishMsgAsync(m)
		require.NoError(t, err)
		if i%5000 == 4999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("the DLQ did not take the letters")
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("the DLQ did not take the letters")
	}
}

// runMeasured runs the bridge as a child process with args and returns its exit status,
// standard output and peak resident set size (bytes): VmHWM, read from /proc while it runs.
// (Not the rusage's maxrss: Linux carries the parent's high-water mark across the fork and
// exec into it, and the parent is the test, with the NATS server and its letters.)
func runMeasured(t *testing.T, args ...string) (int, string, int64) {
	t.Helper()
	cmd := embeddedtest.ChildCommand(args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began := time.Now()
	require.NoError(t, cmd.Start())
	var peak int64
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	for waiting := true; waiting; {
		if hwm := vmHWM(cmd.Process.Pid); hwm > peak {
			peak = hwm
		}
		select {
		case err = <-done:
			waiting = false
		case <-time.After(5 * time.Millisecond):
		}
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("bridge %s: exit %d, peak RSS %.1f MiB after %s; stderr: %s", strings.Join(args[:2], " "), code, float64(peak)/(1<<20), time.Since(began).Round(time.Millisecond), lastLines(errOut.String(), 1))
	return code, out.String(), peak
}

// vmHWM is the peak resident set size of process pid so far, in bytes (0 once it is gone).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestDLQCommandsStreamInBoundedMemory: `bridge dlq count|list|replay|discard` over many
// letters (of dlqPad bytes) take about the memory they take over a tenth of them — they stream, a
// fetch and a chunk at a time — and every letter is replayed once or discarded.
func TestDLQCommandsStreamInBoundedMemory(t *testing.T) {
	n := dlqScale
	s := embeddedtest.NATS(t)
	url := s.ClientURL()
	ctx := context.Background()
	nc := embeddedtest.Connect(t, url)
	bus, err := jetstream.Open(ctx, nc)
	require.NoError(t, err)
	require.NoError(t, bus.EnsureTopic(ctx, jetstream.TopicConfig{Name: "big", Partitions: 4}))
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	require.NoError(t, err)
	defer q.Close()
	js := bus.JetStream()
	began := time.Now()
	storeLetters(t, js, "big", 0, n, dlqPad)
	t.Logf("stored %d letters in %s", n, time.Since(began).Round(time.Millisecond))
	common := []string{"--nats-url", url, "--topic", "big", "--timeout", "0"}
	bridge := func(args ...string) (string, int64) {
		t.Helper()
		code, out, rss := runMeasured(t, append(args, common...)...)
		require.Equal(t, 0, code, out)
		return out, rss
	}
	const margin = 16 << 20
	tenth := strconv.Itoa(n / 10)

	out, listBase := bridge("dlq", "list", "--limit", tenth)
	require.Equal(t, 1+n/10, strings.Count(out, "\n"))
	out, rss := bridge("dlq", "list")
	require.Equal(t, 1+n, strings.Count(out, "\n"), "a header and every letter")
	assert.Less(t, rss, listBase+margin, "dlq list: memory grows with the letters")
	out, rss = bridge("dlq", "count")
	require.Equal(t, strconv.Itoa(n)+"\n", out)
	assert.Less(t, rss, listBase+margin, "dlq count: memory grows with the letters")

	// The replay's baseline fills a chunk: what a replay holds at most.
	chunk := max(n/10, dlq.ReplayChunk)
	out, replayBase := bridge("dlq", "replay", "--limit", strconv.Itoa(chunk))
	require.Contains(t, out, fmt.Sprintf("replayed %d of %d", chunk, chunk))
	half := strconv.Itoa(n / 2)
	out, rss = bridge("dlq", "replay", "--limit", half)
	require.Contains(t, out, fmt.Sprintf("replayed %d of %d", n/2, n/2))
	assert.Less(t, rss, replayBase+margin, "dlq replay: memory grows with the letters")
	rest := n - chunk - n/2
	out, rss = bridge("dlq", "discard", "--yes")
	require.Equal(t, fmt.Sprintf("discarded %d\n", rest), out)
	assert.Less(t, rss, replayBase+margin, "dlq discard: memory grows with the letters")

	left, err := q.Count(ctx, dlq.Filter{})
	require.NoError(t, err)
	assert.Zero(t, left, "the DLQ is empty")
	st, err := js.Stream(ctx, jetbus.StreamName("big"))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, chunk+n/2, info.State.Msgs, "every replayed letter republished once")
}

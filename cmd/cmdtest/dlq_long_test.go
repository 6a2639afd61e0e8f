//go:build long

package cmdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// millionLetters is how many dead letters TestReplayMillionLetters replays.
const millionLetters = 1_000_000

// TestReplayMillionLetters: `bridge dlq replay` (the production binary) replays a million dead
// letters with a peak resident set under 64 MiB, and every letter once.
func TestReplayMillionLetters(t *testing.T) {
	bin := binaries(t, "")
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
	for i := 0; i < millionLetters; i++ {
		m := nats.NewMsg(dlq.SubjectPrefix + "big")
		seq := strconv.Itoa(i + 1)
		m.Header.Set(jetbus.HeaderMsgID, "dlq:big:"+seq+":g")
		m.Header.Set(dlq.HeaderReason, dlq.ReasonPermanent)
		m.Header.Set(dlq.HeaderGroup, "g")
		m.Header.Set(dlq.HeaderAttempts, "1")
		m.Header.Set(dlq.HeaderOriginalSubject, "big.p0")
		m.Header.Set(dlq.HeaderOriginalStream, "big")
		m.Header.Set(dlq.HeaderOriginalSeq, seq)
		m.Header.Set(dlq.HeaderOriginalID, "ev-"+seq)
		m.Header.Set(dlq.HeaderTS, strconv.FormatInt(time.Now().UnixMilli(), 10))
		m.Header.Set(jetbus.HeaderKey, "k"+strconv.Itoa(i%10_000))
		m.Data = []byte(`{"n":` + seq + `,"pad":"` + strings.Repeat("x", 200) + `"}`)
		_, err := js.PublishMsgAsync(m)
		require.NoError(t, err)
		if i%10_000 == 9_999 {
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
	t.Logf("stored %d letters in %s", millionLetters, time.Since(began).Round(time.Millisecond))

	cmd := exec.Command(filepath.Join(bin, "bridge"), "dlq", "replay", "--nats-url", url, "--timeout", "0")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began = time.Now()
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	for waiting := true; waiting; {
		if hwm := vmHWM(cmd.Process.Pid); hwm > peak {
			peak = hwm
		}
		select {
		case err = <-done:
			waiting = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	took := time.Since(began)
	require.NoError(t, err, "%s\n%s", out.String(), errOut.String())
	t.Logf("bridge dlq replay: %s, peak RSS %.1f MiB, %.0f letters/s\n%s", took.Round(time.Millisecond), float64(peak)/(1<<20),
		float64(millionLetters)/took.Seconds(), out.String())
	assert.Contains(t, out.String(), fmt.Sprintf("replayed %d of %d", millionLetters, millionLetters))
	assert.Less(t, peak, int64(64<<20), "a million letters replayed within 64 MiB")

	left, err := q.Count(ctx, dlq.Filter{})
	require.NoError(t, err)
	assert.Zero(t, left, "the DLQ is empty")
	st, err := js.Stream(ctx, jetbus.StreamName("big"))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, millionLetters, info.State.Msgs, "every letter republished once")
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

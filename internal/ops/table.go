package ops

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetbus/jetbus/dlq"
)

// WriteTable writes st for a terminal: one table per section, times in RFC 3339.
func WriteTable(w io.Writer, st *Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }

	p("TOPIC\tPARTITIONS\tREPLICAS\tMESSAGES\tFIRST SEQ\tLAST SEQ\n")
	for _, t := range st.Topics {
		if t.Missing {
			p("%s\t-\t-\t-\t-\t-\t(declared, not created)\n", t.Name)
			continue
		}
		p("%s\t%d\t%d\t%d\t%d\t%d\n", t.Name, t.Partitions, t.Replicas, t.Messages, t.FirstSeq, t.LastSeq)
	}
	p("\n")

	p("GROUP\tTOPIC\tMEMBERS\tBALANCED\tLAG\tLAG SECONDS\n")
	for _, g := range st.Groups {
		bal := "-"
		if g.Partitioned {
			bal = yesNo(g.Balanced)
		}
		p("%s\t%s\t%d\t%s\t%d\t%s", g.Group, g.Topic, len(g.Members), bal, g.Lag, seconds(g.LagSeconds))
		if g.Error != "" {
			p("\terror: %s", oneLine(g.Error))
		}
		p("\n")
	}
	p("\n")

	p("GROUP\tTOPIC\tPARTITION\tOWNER\tLEASE\tLEASE OWNER\tRENEWED\tACK FLOOR\tDELIVERED\tPENDING\tACK PENDING\tLAG\tLAG SECONDS\n")
	for _, g := range st.Groups {
		for _, pt := range g.Partitions {
			pos := "-\t-\t-\t-\t-\t-"
			if pt.Consumer {
				pos = fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%s", pt.AckFloor, pt.Delivered, pt.Pending, pt.AckPending, pt.Lag, seconds(pt.LagSeconds))
			}
			p("%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", g.Group, g.Topic, pt.Partition, dash(pt.Owner), pt.Lease,
				dash(pt.LeaseOwner), when(pt.LeaseRenewed), pos)
		}
	}
	p("\n")

	p("MEMBER\tGROUP\tTOPIC\tHOST\tPID\tJOINED\tLAST SEEN\n")
	for _, g := range st.Groups {
		for _, m := range g.Members {
			p("%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.ID, g.Group, g.Topic, dash(m.Host), m.PID, when(m.Joined), when(m.LastSeen))
		}
	}
	p("\n")

	if !st.DLQ.Exists {
		p("DEAD LETTERS: no DLQ stream\n")
	} else {
		p("DEAD LETTERS\tREASON\tCOUNT\n")
		for _, r := range st.DLQ.ByReason {
			p("%s\t%s\t%d\n", r.Topic, r.Reason, r.Count)
		}
		partial := ""
		if st.DLQ.Partial {
			partial = fmt.Sprintf(" (reasons of the oldest %d only)", ScanLimit)
		}
		p("total\t\t%d%s\n", st.DLQ.Total, partial)
		p("refused by ingress (%s)\t\t%d\n", dlq.RejectsStreamName, st.DLQ.Rejects)
	}

	if len(st.Components) > 0 {
		p("\nCOMPONENT\tSTATE\tREADY\tERROR\n")
		for _, c := range st.Components {
			p("%s\t%s\t%s\t%s\n", c.Name, c.State, yesNo(c.Ready), oneLine(c.Error))
		}
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// seconds writes a lag in time: "0s", "1.5s", "2m3s".
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}

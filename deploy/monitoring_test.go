package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/ops/opstest"
)

const (
	alertRules = "monitoring/alerts.yaml"
	dashboard  = "monitoring/dashboard.json"
	opsDoc     = "../docs/operations.md"
)

var promParser = parser.NewParser(parser.Options{})

// loadRules parses the shipped alert rules as promtool check rules does.
func loadRules(t *testing.T) map[string]rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertRules, false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler))
	require.Empty(t, errs, "%s parses as Prometheus rules", alertRules)
	rules := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "only alerting rules")
			require.NotContains(t, rules, r.Alert, "alert names are unique")
			rules[r.Alert] = r
		}
	}
	return rules
}

// metricNames returns the metric names an expression selects (histogram series by family).
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := promParser.ParseExpr(expr)
	require.NoError(t, err, expr)
	var names []string
	for _, sel := range parser.ExtractSelectors(e) {
		for _, m := range sel {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				n := m.Value
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(n, suffix); ok && strings.HasSuffix(base, "_seconds") {
						n = base
					}
				}
				names = append(names, n)
			}
		}
	}
	require.NotEmpty(t, names, "%s selects a metric by name", expr)
	return names
}

// documented reports whether docs/operations.md names the metric (as `name` or `name{…}`).
func documented(doc, name string) bool {
	return name == "up" || strings.Contains(doc, "`"+name+"`") || strings.Contains(doc, "`"+name+"{")
}

// TestAlertRules: the shipped rules parse, cover what an operator must hear about, and name
// only series jetbus exports (every one is in docs/operations.md).
func TestAlertRules(t *testing.T) {
	rules := loadRules(t)
	for _, want := range []string{"JetbusDown", "JetbusNotReady", "JetbusGroupLagging", "JetbusProjectionLagging",
		"JetbusProjectionDeadLetters", "JetbusDeadLettersGrowing", "JetbusDeadLettersDroppedByLimit",
		"JetbusKeysParked", "JetbusProjectionOutOfOrder", "JetbusChangefeedFailed", "JetbusChangefeedHistoryLost", "JetbusChangefeedLagging",
		"JetbusIngressUnavailable"} {
		assert.Contains(t, rules, want)
	}
	doc, err := os.ReadFile(opsDoc)
	require.NoError(t, err)
	for name, r := range rules {
		for _, m := range metricNames(t, r.Expr) {
			assert.True(t, documented(string(doc), m), "%s uses %s, which docs/operations.md does not list", name, m)
		}
		assert.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], "%s has a severity", name)
		assert.NotEmpty(t, r.Annotations["summary"], "%s has a summary", name)
		assert.True(t, strings.Contains(string(doc), name), "docs/operations.md names the alert %s", name)
	}
}

// TestDashboard: the Grafana dashboard is JSON Grafana imports (panels with Prometheus
// targets on the datasource variable), and every query parses and names documented series.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboard)
	require.NoError(t, err)
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Title      string `json:"title"`
			Datasource struct{ Type, UID string }
			Targets    []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	require.Equal(t, "jetbus", d.UID)
	require.True(t, slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type string }) bool {
		return v.Name == "datasource" && v.Type == "datasource"
	}), "a datasource variable")
	doc, err := os.ReadFile(opsDoc)
	require.NoError(t, err)
	seen := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel ids are unique")
		ids[p.ID] = true
		assert.Equal(t, "prometheus", p.Datasource.Type, p.Title)
		assert.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, m := range metricNames(t, tg.Expr) {
				seen[m] = true
				assert.True(t, documented(string(doc), m), "panel %q uses %s, which docs/operations.md does not list", p.Title, m)
			}
		}
	}
	for _, m := range []string{"jetbus_group_lag_seconds", "projection_lag_seconds", "dlq_dead_letters_total", "changefeed_lag_seconds", "jetbus_ready"} {
		assert.True(t, seen[m], "the dashboard shows %s", m)
	}
}

// TestGroupLagAlertFires: a consumer group whose partition stalls (its handler holds its
// deliveries) exports jetbus_group_lag_seconds; with the clock an hour on, the shipped
// JetbusGroupLagging expression fires on the scraped series for that group; on the same
// group read at the real time (seconds behind) it does not.
func TestGroupLagAlertFires(t *testing.T) {
	rule := loadRules(t)["JetbusGroupLagging"]
	s := embeddedtest.NATS(t)
	g := opstest.StartGroup(t, s.ClientURL())
	var offset atomic.Int64
	src := ops.Source{JS: g.Bus.JetStream(), Bus: g.Bus, Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }}
	srv := httptest.NewServer(ops.Endpoints{Gatherer: prometheus.NewRegistry(),
		Status: func(ctx context.Context) (*ops.Status, error) { return ops.Collect(ctx, src) }}.Handler())
	defer srv.Close()

	fires := func() []string {
		series := scrapeSeries(t, srv.URL, "jetbus_group_lag_seconds")
		require.Len(t, series, g.Partitions, "a series per partition")
		st := promqltest.LoadedStorage(t, "load 1m\n  "+strings.Join(series, "\n  "))
		eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 10000, Timeout: 10 * time.Second})
		q, err := eng.NewInstantQuery(t.Context(), st, nil, rule.Expr, time.Unix(0, 0))
		require.NoError(t, err)
		res := q.Exec(t.Context())
		require.NoError(t, res.Err)
		v, err := res.Vector()
		require.NoError(t, err)
		var out []string
		for _, s := range v {
			out = append(out, s.Metric.Get("topic")+"/"+s.Metric.Get("group"))
		}
		return out
	}
	assert.Empty(t, fires(), "seconds behind: no alert")
	offset.Store(int64(time.Hour))
	var got []string
	require.True(t, embeddedtest.Poll(10*time.Second, 100*time.Millisecond, func() bool {
		got = fires()
		return len(got) > 0
	}), "an hour behind: the alert's expression fires")
	assert.Equal(t, []string{g.Topic + "/" + g.Group}, got)
}

// scrapeSeries returns the lines of family name on /metrics, as "name{labels} value".
func scrapeSeries(t *testing.T, url, name string) []string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^%s\{[^}]*\} \S+$`, regexp.QuoteMeta(name)))
	return re.FindAllString(string(b), -1)
}

// TestAlertsIgnoreWhatClientsCause: refusals are what any NATS client can cause at will, and
// refusals age out of DLQ_REJECTS by design: neither may fire an alert, while the same
// growth of handlers' dead letters does.
func TestAlertsIgnoreWhatClientsCause(t *testing.T) {
	rules := loadRules(t)
	eval := func(expr, series string) int {
		st := promqltest.LoadedStorage(t, "load 1m\n  "+series)
		eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 100000, Timeout: 10 * time.Second})
		q, err := eng.NewInstantQuery(t.Context(), st, nil, expr, time.Unix(0, 0).Add(40*time.Minute))
		require.NoError(t, err)
		res := q.Exec(t.Context())
		require.NoError(t, res.Err)
		v, err := res.Vector()
		require.NoError(t, err)
		return len(v)
	}
	growing := rules["JetbusDeadLettersGrowing"].Expr
	dropped := rules["JetbusDeadLettersDroppedByLimit"].Expr
	assert.Zero(t, eval(growing, `dlq_dead_letters_total{topic="_other",group="ingress",reason="ingress"} 0+100x40`), "a refusal flood")
	assert.Equal(t, 1, eval(growing, `dlq_dead_letters_total{topic="orders",group="billing",reason="max-attempts"} 0+100x40`), "a failing handler")
	assert.Zero(t, eval(dropped, `dlq_dropped_by_limit_total{stream="DLQ_REJECTS"} 0+100x40`), "refusals aging out")
	assert.Equal(t, 1, eval(dropped, `dlq_dropped_by_limit_total{stream="DLQ"} 0+1x40`), "dead letters dropped")
}

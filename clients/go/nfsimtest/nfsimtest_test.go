package nfsimtest

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

func start(t *testing.T) *Session {
	t.Helper()
	if _, err := Binary(); err != nil {
		t.Skip("nfsim not found: set NFSIM_BIN")
	}
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func host(addr string) string { return addr[:strings.LastIndex(addr, ":")] }

// The chi-square quantile at p = 0.001 for 1..9 degrees of freedom.
var chi2999 = []float64{10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88}

// Endpoint choice frequencies over random Services agree with the exact probabilities.
func TestUniformityOverRandomServices(t *testing.T) {
	s := start(t)
	rng := rand.New(rand.NewSource(32))
	for k := 0; k < 4; k++ {
		n := 1 + rng.Intn(8)
		ip := fmt.Sprintf("10.96.%d.%d", 1+rng.Intn(200), 1+rng.Intn(250))
		port := []int{53, 80, 443, 8080}[rng.Intn(4)]
		var eps []string
		for i := 0; i < n; i++ {
			eps = append(eps, fmt.Sprintf("10.244.%d.%d", 1+i/200, 10+i%200))
		}
		if err := s.Node(NodeSpec{Objects: ServiceYAML(fmt.Sprintf("svc%d", k), ip, port, "TCP", eps), Seed: uint64(k + 1)}); err != nil {
			t.Fatal(err)
		}
		rules, err := s.Rules("iptables")
		if err != nil {
			t.Fatal(err)
		}
		chain, err := SvcChainOf(rules, ip, port)
		if err != nil {
			t.Fatal(err)
		}
		sel, err := s.Selection(chain)
		if err != nil {
			t.Fatal(err)
		}
		probs := map[string]float64{}
		sum := 0.0
		for _, c := range sel.Choices {
			probs[host(*c.Endpoint)] += c.Probability.Float
			sum += c.Probability.Float
		}
		if len(probs) != n || sel.FallThrough.Fraction != "0" || sum < 1-1e-12 || sum > 1+1e-12 {
			t.Fatalf("selection of %s: %+v", chain, sel)
		}
		const flows = 300
		seen := map[string]int{}
		for i := 0; i < flows; i++ {
			f, err := s.Flow(fmt.Sprintf("tcp 10.244.0.%d:%d -> %s:%d SYN", 2+i%250, 20000+i, ip, port), "")
			if err != nil {
				t.Fatal(err)
			}
			if f.Fate != "transmitted" || f.Endpoint == nil {
				t.Fatalf("flow %d: %+v", i, f)
			}
			seen[host(*f.Endpoint)]++
		}
		if n == 1 {
			if seen[eps[0]] != flows {
				t.Fatalf("one endpoint, seen %v", seen)
			}
			continue
		}
		chi2 := 0.0
		for _, e := range eps {
			want := flows * probs[e]
			d := float64(seen[e]) - want
			chi2 += d * d / want
		}
		if chi2 >= chi2999[n-2] {
			t.Fatalf("service %d (%d endpoints): chi-square %.2f over %v, probabilities %v", k, n, chi2, seen, probs)
		}
	}
}

const dnsIP, query = "10.96.0.10", "udp 10.244.0.9:40000 -> 10.96.0.10:53"

var pods = []string{"10.244.1.5", "10.244.2.5"}

// reconcile is a stale-UDP reconciler in Go: it deletes the entries to the DNS Service whose
// endpoint (the reply's source) is not serving.
func reconcile(s *Session, serving []string) (int, error) {
	toService := "-p udp --orig-dst " + dnsIP + " --orig-port-dst 53"
	entries, _, err := s.Conntrack(toService)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, e := range entries {
		live := false
		for _, ip := range serving {
			live = live || ip == e.Reply.Src
		}
		if !live {
			n, err := s.Delete(toService + " --reply-src " + e.Reply.Src + " --reply-port-src 53")
			if err != nil {
				return deleted, err
			}
			deleted += n
		}
	}
	return deleted, nil
}

// The stale-DNS incident: the stale UDP entry exists, the Go reconciler deletes it, the next
// query reaches the live pod.
func TestReconcilerThroughStaleDNS(t *testing.T) {
	s := start(t)
	if err := s.Node(NodeSpec{Objects: ServiceYAML("dns", dnsIP, 53, "UDP", pods), Release: "none"}); err != nil {
		t.Fatal(err)
	}
	f, err := s.Flow(query, "1s")
	if err != nil {
		t.Fatal(err)
	}
	first := host(*f.Endpoint)
	live := pods[0]
	if live == first {
		live = pods[1]
	}
	if err := s.Apply(ServiceYAML("dns", dnsIP, 53, "UDP", pods, first), "2s"); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance("3s"); err != nil {
		t.Fatal(err)
	}
	if f, err = s.Flow(query, "4s"); err != nil || *f.Endpoint != first+":53" {
		t.Fatalf("want the stale entry to %s: %+v %v", first, f, err)
	}
	if n, err := reconcile(s, []string{live}); err != nil || n != 1 {
		t.Fatalf("reconciler deleted %d, %v; want 1", n, err)
	}
	if n, err := reconcile(s, []string{live}); err != nil || n != 0 {
		t.Fatalf("second pass deleted %d, %v; want 0", n, err)
	}
	if f, err = s.Flow(query, "5s"); err != nil || *f.Endpoint != live+":53" {
		t.Fatalf("want the live pod %s: %+v %v", live, f, err)
	}
}

// A bad request is a located, typed error, and the session goes on.
func TestErrorsAreLocated(t *testing.T) {
	s := start(t)
	_, err := s.Flow("udp 1.2.3.4:1 -> 5.6.7.8:9", "")
	var e *Error
	if !errors.As(err, &e) || e.Kind != "state" || e.Line != 2 {
		t.Fatalf("flow before any node: %v", err)
	}
	if err := s.Node(NodeSpec{Objects: ServiceYAML("dns", dnsIP, 53, "UDP", pods)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance("10s"); err != nil {
		t.Fatal(err)
	}
	err = s.Advance("5s")
	if !errors.As(err, &e) || e.Kind != "time" || e.Field == nil || *e.Field != "at" {
		t.Fatalf("advance backwards: %v", err)
	}
	if f, err := s.Flow(query, ""); err != nil || f.Fate != "transmitted" {
		t.Fatalf("after the errors: %+v %v", f, err)
	}
}

// loadgen: the load generator for the peers of bench/peers/run.py, compiled at run time
// from Debian's golang-go and golang-github-nats-io-go-nats-dev (no module download).
//
//	loadgen -system nats -mode produce -n N -size B -window W   JetStream PublishAsync, W in flight
//	loadgen -system nats -mode latency -n N -size B             js.Publish, one in flight
//	loadgen -system nats -mode consume -n N -batch K            pull consumer, AckNone, Fetch(K)
//	loadgen -system etcd -mode produce -n N -size B -window W   W concurrent puts (HTTP gateway)
//	loadgen -system etcd -mode latency -n N -size B             one put in flight
//
// Every mode is bounded by -n records and -secs seconds. Prints one JSON object: records,
// errors, seconds, records_per_s, and for latency the percentiles in ms.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

type result struct {
	Records     int     `json:"records"`
	Errors      int     `json:"errors"`
	Seconds     float64 `json:"seconds"`
	RecordsPerS float64 `json:"records_per_s"`
	P50Ms       float64 `json:"p50_ms,omitempty"`
	P99Ms       float64 `json:"p99_ms,omitempty"`
	AvgMs       float64 `json:"avg_ms,omitempty"`
}

var (
	system = flag.String("system", "nats", "nats|etcd")
	mode   = flag.String("mode", "produce", "produce|latency|consume")
	url    = flag.String("url", "", "nats: server URLs; etcd: comma-separated client URLs")
	n      = flag.Int("n", 100000, "records at most")
	size   = flag.Int("size", 100, "record size in bytes")
	window = flag.Int("window", 4096, "records in flight (produce)")
	batch  = flag.Int("batch", 1000, "records per pull (nats consume)")
	secs   = flag.Float64("secs", 60, "seconds at most")
	stream = flag.String("stream", "BENCH", "stream name (nats)")

	asyncErrors int64 // negative acknowledgements of async publishes
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", args...)
	os.Exit(1)
}

func deadline() time.Time {
	return time.Now().Add(time.Duration(*secs * float64(time.Second)))
}

func finish(records, errors int, started time.Time, latencies []float64) result {
	elapsed := time.Since(started).Seconds()
	out := result{Records: records, Errors: errors, Seconds: elapsed,
		RecordsPerS: float64(records-errors) / elapsed}
	if len(latencies) > 0 {
		sort.Float64s(latencies)
		sum := 0.0
		for _, l := range latencies {
			sum += l
		}
		out.AvgMs = sum / float64(len(latencies))
		out.P50Ms = latencies[len(latencies)*50/100]
		out.P99Ms = latencies[len(latencies)*99/100]
	}
	return out
}

// ------------------------------------------------------------------------------ NATS --
func natsProduce(js nats.JetStreamContext, payload []byte) result {
	end := deadline()
	started := time.Now()
	sent, errors := 0, 0
	for sent < *n && time.Now().Before(end) {
		if _, err := js.PublishAsync("bench.a", payload); err != nil {
			// Too many acks outstanding (stalled): wait for some, then send it again.
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		sent++
	}

	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Until(end) + 30*time.Second):
		fail("publish acks not complete in time")
	}
	return finish(sent, errors+int(atomic.LoadInt64(&asyncErrors)), started, nil)
}

func natsLatency(js nats.JetStreamContext, payload []byte) result {
	end := deadline()
	started := time.Now()
	latencies := make([]float64, 0, *n)
	errors := 0
	for len(latencies) < *n && time.Now().Before(end) {
		at := time.Now()
		if _, err := js.Publish("bench.s", payload); err != nil {
			errors++
		}
		latencies = append(latencies, float64(time.Since(at).Nanoseconds())/1e6)
	}
	return finish(len(latencies), errors, started, latencies)
}

func natsConsume(js nats.JetStreamContext) result {
	sub, err := js.PullSubscribe("bench.>", "", nats.BindStream(*stream), nats.AckNone(),
		nats.DeliverAll())
	if err != nil {
		fail("pull subscribe: %v", err)
	}
	end := deadline()
	started := time.Now()
	read := 0
	for read < *n && time.Now().Before(end) {
		want := *batch
		if *n-read < want {
			want = *n - read
		}
		msgs, err := sub.Fetch(want, nats.MaxWait(5*time.Second))
		if err != nil && err != nats.ErrTimeout {
			fail("fetch: %v", err)
		}
		read += len(msgs)
	}
	return finish(read, 0, started, nil)
}

func runNats() result {
	nc, err := nats.Connect(*url)
	if err != nil {
		fail("connect: %v", err)
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(*window),
		nats.PublishAsyncErrHandler(func(_ nats.JetStream, _ *nats.Msg, _ error) {
			atomic.AddInt64(&asyncErrors, 1)
		}))
	if err != nil {
		fail("jetstream: %v", err)
	}
	payload := make([]byte, *size)
	if *mode != "consume" {
		if _, err := js.StreamInfo(*stream); err != nil {
			// A replicas=3 file stream; the servers run with sync_interval: always.
			_, err = js.AddStream(&nats.StreamConfig{Name: *stream, Subjects: []string{"bench.>"},
				Replicas: 3, Storage: nats.FileStorage, MaxBytes: 8 << 30})
			if err != nil {
				fail("add stream: %v", err)
			}
		}
	}
	switch *mode {
	case "produce":
		return natsProduce(js, payload)
	case "latency":
		return natsLatency(js, payload)
	case "consume":
		return natsConsume(js)
	}
	fail("unknown mode %q", *mode)
	return result{}
}

// ------------------------------------------------------------------------------ etcd --
func etcdPut(client *http.Client, endpoint, key string, value string) error {
	body := fmt.Sprintf(`{"key":%q,"value":%q}`, base64.StdEncoding.EncodeToString([]byte(key)), value)
	resp, err := client.Post(endpoint+"/v3/kv/put", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// etcdLeader: the client URL of the current leader (every put goes to it, as etcd's own
// benchmark does), found from each endpoint's status.
func etcdLeader(client *http.Client, endpoints []string) string {
	for _, endpoint := range endpoints {
		resp, err := client.Post(endpoint+"/v3/maintenance/status", "application/json",
			bytes.NewBufferString("{}"))
		if err != nil {
			continue
		}
		var status struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		err = json.NewDecoder(resp.Body).Decode(&status)
		resp.Body.Close()
		if err == nil && status.Leader != "" && status.Leader == status.Header.MemberID {
			return endpoint
		}
	}
	return endpoints[0]
}

func runEtcd() result {
	workers := 1
	if *mode == "produce" {
		workers = *window
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers + 1,
		MaxConnsPerHost: workers + 1}, Timeout: 30 * time.Second}
	endpoint := etcdLeader(client, strings.Split(*url, ","))
	value := base64.StdEncoding.EncodeToString(make([]byte, *size))
	end := deadline()
	var next, errors int64
	latencies := make([][]float64, workers)
	var wg sync.WaitGroup
	started := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for time.Now().Before(end) {
				i := atomic.AddInt64(&next, 1)
				if i > int64(*n) {
					return
				}
				at := time.Now()
				if err := etcdPut(client, endpoint, fmt.Sprintf("bench/%012d", i), value); err != nil {
					atomic.AddInt64(&errors, 1)
				}
				latencies[w] = append(latencies[w], float64(time.Since(at).Nanoseconds())/1e6)
			}
		}(w)
	}
	wg.Wait()
	all := []float64{}
	for _, l := range latencies {
		all = append(all, l...)
	}
	if *mode != "latency" {
		return finish(len(all), int(errors), started, nil)
	}
	return finish(len(all), int(errors), started, all)
}

func main() {
	flag.Parse()
	var out result
	switch *system {
	case "nats":
		out = runNats()
	case "etcd":
		out = runEtcd()
	default:
		fail("unknown system %q", *system)
	}
	data, _ := json.Marshal(out)
	fmt.Println(string(data))
}

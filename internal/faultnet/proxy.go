// Package faultnet is a TCP proxy that can take a backend away: it stands
// between clients and a server (PostgreSQL, Redis) and, on command, refuses
// and cuts connections (Down), adds latency to every byte forwarded (Delay)
// or stops forwarding while keeping connections open (Stall). The tests
// (through internal/testkit) and the soak (cmd/outboxd-bench soak) share it.
package faultnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection it accepts on Addr to its target. It is
// safe for concurrent use.
type Proxy struct {
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   []net.Conn
	delay   time.Duration
	stalled chan struct{} // non-nil while stalled; closed by Unstall
	wg      sync.WaitGroup
}

// Listen starts a proxy to target (host:port) on addr ("127.0.0.1:0" for
// a spare port).
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("error listening for a proxy to %s: %w", target, err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String()}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // taken down meanwhile
				p.mu.Unlock()
				c.Close()
				u.Close()
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(u, c) })
			p.wg.Go(func() { p.pipe(c, u) })
		}
	})
}

// pipe copies from src to dst, each chunk after the current delay and
// while no stall holds it, and closes dst at the end.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay, stalled := p.delay, p.stalled
			p.mu.Unlock()
			if stalled != nil {
				<-stalled
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
			}
			return
		}
	}
}

// Down refuses new connections and cuts the open ones.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Up listens again on the proxy's address (after Down); on a proxy that is
// up it does nothing.
func (p *Proxy) Up() error {
	p.mu.Lock()
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("error listening again on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// Delay holds every chunk forwarded, both ways, for d before it is written
// (0: none).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Stall stops forwarding on every connection, open or new, until Unstall:
// the connections stay open and the clients wait.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// Unstall forwards again what Stall held.
func (p *Proxy) Unstall() {
	p.mu.Lock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

// Heal undoes every fault: Up, no delay, no stall.
func (p *Proxy) Heal() error {
	p.Unstall()
	p.Delay(0)
	return p.Up()
}

// Close takes the proxy down for good and waits for its goroutines.
func (p *Proxy) Close() {
	p.Unstall()
	p.Down()
	p.wg.Wait()
}

package main

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy is a TCP proxy on loopback in front of Redis, for faults the
// servers can't make themselves: it can drop Redis's replies (a reply lost
// after the command ran) and switch to another server (a failover behind
// one address, as a virtual IP or a Sentinel-aware proxy does).
type proxy struct {
	ln     net.Listener
	target atomic.Pointer[string]
	drop   atomic.Bool // discard Redis's replies while set
	hold   atomic.Bool // hold Redis's bytes back while set (a link that lags)
	closed atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.target.Store(&target)
	p.wg.Go(p.accept)
	return p, nil
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.Dial("tcp", *p.target.Load())
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Go(func() {
			io.Copy(up, c)
			up.Close()
			c.Close()
		})
		p.wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				// Held bytes wait here, and are lost if the link is cut
				// meanwhile (polling: a fault tool, not a hot path).
				for p.hold.Load() && !p.closed.Load() && !p.isCut(c) {
					time.Sleep(5 * time.Millisecond)
				}
				if n > 0 && !p.drop.Load() && !p.isCut(c) {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			up.Close()
			c.Close()
		})
	}
}

// track remembers a connection pair, or closes it when the proxy is closed.
func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// isCut reports whether c was cut (closed by cut or Close).
func (p *proxy) isCut(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, open := p.conns[c]
	return !open
}

// cut closes every open connection: the clients reconnect, to the current
// target.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// switchTo sends new connections to target and cuts the open ones.
func (p *proxy) switchTo(target string) {
	p.target.Store(&target)
	p.cut()
}

func (p *proxy) Close() {
	p.closed.Store(true)
	p.ln.Close()
	p.cut()
	p.mu.Lock()
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

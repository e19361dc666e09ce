package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

var (
	white  = color.RGBA{255, 255, 255, 255}
	black  = color.RGBA{30, 30, 30, 255}
	grey   = color.RGBA{200, 200, 200, 255}
	colors = map[string]color.RGBA{
		"none":     {150, 150, 150, 255},
		"inmem":    {86, 180, 233, 255},
		"redis":    {230, 159, 0, 255},
		"tollgate": {0, 158, 115, 255},
		"minimal":  {204, 121, 167, 255},
		"before":   {213, 94, 0, 255},
		"empty":    {0, 114, 178, 255},
	}
)

func text(img *image.RGBA, x, y int, s string) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(black), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func rect(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	draw.Draw(img, image.Rect(x0, y0, x1, y1), image.NewUniform(c), image.Point{}, draw.Src)
}

// panel draws one bar group per series (median bar, min-max whisker).
func panel(img *image.RGBA, x0, y0, w, h int, title, unit string, groups []string, series []map[string]stat, max float64) {
	text(img, x0, y0+12, title)
	top, bottom := y0+30, y0+h-40
	left := x0 + 50
	rect(img, left, bottom, x0+w, bottom+1, black)
	for i := 0; i <= 4; i++ {
		v := max * float64(i) / 4
		y := bottom - int(float64(bottom-top)*float64(i)/4)
		rect(img, left, y, x0+w, y+1, grey)
		text(img, x0, y+4, fmt.Sprintf("%.2g", v))
	}
	text(img, x0, top-6, unit)
	gw := (w - 60) / len(groups)
	for gi, g := range groups {
		gx := left + 10 + gi*gw
		bw := (gw - 20) / len(routes)
		for ri, rt := range routes {
			s := series[gi][rt]
			if len(s) == 0 {
				continue
			}
			bx := gx + ri*bw
			scale := func(v float64) int {
				if v < 0 {
					v = 0
				}
				if v > max {
					v = max
				}
				return bottom - int(float64(bottom-top)*v/max)
			}
			rect(img, bx, scale(s.median()), bx+bw-4, bottom, colors[rt])
			mid := bx + (bw-4)/2
			rect(img, mid, scale(s.hi()), mid+1, scale(s.lo())+1, black)
		}
		text(img, gx, bottom+16, g)
	}
}

func drawChart(path string, res *results) error {
	const W, H = 1260, 448
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	max := 1.0
	for _, m := range []map[string]stat{res.ratio, res.ratioReject} {
		for _, s := range m {
			if len(s) > 0 && s.hi() > max {
				max = s.hi()
			}
		}
	}
	panel(img, 10, 10, 400, 360, "Throughput at saturation, ratio to no middleware", "x",
		[]string{"nothing rejected", "almost all rejected"}, []map[string]stat{res.ratio, res.ratioReject}, max*1.1)
	lmax := 0.1
	for _, m := range []map[string]stat{res.p50, res.p99} {
		for rt, s := range m {
			if rt != "none" && len(s) > 0 && s.hi() > lmax {
				lmax = s.hi()
			}
		}
	}
	noNone := func(m map[string]stat) map[string]stat {
		c := map[string]stat{}
		for k, v := range m {
			if k != "none" {
				c[k] = v
			}
		}
		return c
	}
	panel(img, 430, 10, 400, 360, fmt.Sprintf("Added latency at %.0f req/s (minus no middleware)", res.rate), "ms",
		[]string{"p50", "p99"}, []map[string]stat{noNone(res.p50), noNone(res.p99)}, lmax*1.1)
	smax := 0.01
	for _, m := range []map[string]stat{res.seq50, res.seq99} {
		for rt, s := range m {
			if rt != "none" && len(s) > 0 && s.hi() > smax {
				smax = s.hi()
			}
		}
	}
	panel(img, 850, 10, 400, 360, "Added latency, sequential (minus no middleware)", "ms",
		[]string{"p50", "p99"}, []map[string]stat{noNone(res.seq50), noNone(res.seq99)}, smax*1.1)
	x, y := 20, H-58 // the legend, on a second line when the first is full
	for _, rt := range routes {
		if x+20+7*len(labels[rt]) > W {
			x, y = 20, y+18
		}
		rect(img, x, y, x+14, y+14, colors[rt])
		text(img, x+20, y+12, labels[rt])
		x += 40 + 7*len(labels[rt])
	}
	text(img, 20, H-8, "Bars: median of the runs; whiskers: min-max. One Traefik v3.6.12 process, loopback, see BENCHMARKS.md.")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

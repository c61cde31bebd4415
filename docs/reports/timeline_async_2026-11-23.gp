set terminal pngcairo size 1400,480 font 'sans,10'
set termoption noenhanced
set output 'timeline_async_2026-11-23.png'
set title '/tmp/tl_async: steps 100 to 102'
set xlabel 'ms from the start of step 100'
set yrange [-0.7:7.7]
set ytics ('worker:0 train' 7, 'worker:0 ps:0' 6, 'worker:0 ps:1' 5, 'worker:1 train' 4, 'worker:1 ps:0' 3, 'worker:1 ps:1' 2, 'ps:0 shard 0' 1, 'ps:1 shard 1' 0)
set xrange [0:69.0520]
set grid xtics
set key outside right top
set lmargin 24
plot 'timeline_async_2026-11-23.dat' index 0 using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '#4477aa' title 'compute', \
     '' index 1 using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '#66ccee' title 'forward', \
     '' index 2 using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '#225588' title 'backward', \
     '' index 3 using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '#ee6677' title 'push_pull', \
     '' index 4 using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '#ccbb44' title 'ps reply', \
     '' index 5 using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '#ee7733' title 'apply'

# Drawn by pstrain; redraw with: gnuplot throughput.gp (in this directory)
set terminal pngcairo size 900,540 font 'sans,10' noenhanced
set output 'throughput.png'
set title 'Training throughput against workers'
set xlabel 'workers'
set ylabel 'train images/s'
set grid
set key below reverse Left samplen 2 spacing 1.2 width 2
set xrange [0.5:12.5]
set yrange [0:*]
set xtics (1, 2, 4, 8, 12)
plot 'throughput.dat' index 0 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 1 title '1 ps', \
     '' index 1 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 1 dt 2 title '1 ps, linear', \
     '' index 2 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 2 title '2 ps', \
     '' index 3 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 2 dt 2 title '2 ps, linear', \
     '' index 4 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 3 title '4 ps', \
     '' index 5 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 3 dt 2 title '4 ps, linear'

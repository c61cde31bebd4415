# Drawn by pstrain; redraw with: gnuplot throughput.gp (in this directory)
set terminal pngcairo size 900,540 font 'sans,10' noenhanced
set output 'throughput.png'
set title 'Training throughput against workers'
set xlabel 'workers'
set ylabel 'train images/s'
set grid
set key below reverse Left samplen 2 spacing 1.2 width 2
set xrange [0.5:4.5]
set yrange [0:*]
set xtics (1, 2, 4)
set arrow from 2, graph 0 to 2, graph 1 nohead dt 4 lc rgb 'gray40'
set label '2 cores (this machine)' at 2, graph 0.96 offset 0.5, 0 textcolor rgb 'gray40'
plot 'throughput.dat' index 0 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 1 title '1 ps', \
     '' index 1 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 1 dt 2 title '1 ps, linear', \
     '' index 2 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 2 title '2 ps', \
     '' index 3 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 2 dt 2 title '2 ps, linear'

# Drawn by pstrain; redraw with: gnuplot accuracy_vs_time.gp (in this directory)
set terminal pngcairo size 900,540 font 'sans,10' noenhanced
set output 'accuracy_vs_time.png'
set title 'Test accuracy against training time'
set xlabel 'training seconds (evaluation pauses left out)'
set ylabel 'test accuracy (10k images)'
set grid
set key below reverse Left samplen 2 spacing 1.2 width 2
set xrange [*:*]
set yrange [*:1]
plot 'accuracy_vs_time.dat' index 0 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 1 title 'sync', \
     '' index 1 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 2 title 'async', \
     '' index 2 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 3 title 'ssp:2', \
     '' index 3 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 4 title 'sync+backup:1', \
     0.95 with lines dt 3 lw 1 lc rgb 'gray40' title '95%', \
     0.97 with lines dt 3 lw 1 lc rgb 'gray40' title '97%', \
     0.98 with lines dt 3 lw 1 lc rgb 'gray40' title '98%', \
     0.99 with lines dt 3 lw 1 lc rgb 'gray40' title '99%'

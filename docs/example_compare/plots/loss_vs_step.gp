# Drawn by pstrain; redraw with: gnuplot loss_vs_step.gp (in this directory)
set terminal pngcairo size 900,540 font 'sans,10' noenhanced
set output 'loss_vs_step.png'
set title 'Training loss against step'
set xlabel 'step (per worker)'
set ylabel 'training loss (mean over workers, moving average)'
set grid
set key below reverse Left samplen 2 spacing 1.2 width 2
set xrange [*:*]
set yrange [0:*]
plot 'loss_vs_step.dat' index 0 using 1:2 with lines lw 2 lc 1 title 'sync (11-step average)', \
     '' index 1 using 1:2 with lines lw 2 lc 2 title 'async (11-step average)', \
     '' index 2 using 1:2 with lines lw 2 lc 3 title 'ssp:2 (11-step average)', \
     '' index 3 using 1:2 with lines lw 2 lc 4 title 'sync+backup:1 (11-step average)'

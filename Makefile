# The front door: `make demo`, `make test`, `make bench`,
# `make test-sanitize`. Each installs missing Debian packages first.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build demo test bench recipes test-sanitize fuzz format clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The fashion recipe from its model file: train, save, then classify three
# test images with the saved weights.
demo: build
	$(BUILD)/mxu train models/fashion_mnist.json --data fashion-mnist \
	  --epochs 5 --batch-size 1000 --save-weights $(BUILD)/fashion.weights.h5 \
	  --report $(BUILD)/fashion_report.json
	$(BUILD)/mxu predict models/fashion_mnist.json \
	  --weights $(BUILD)/fashion.weights.h5 --data fashion-mnist \
	  --index 0,1,2 --top 3

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j 2

# The full recipes, each exiting non-zero below its published bar.
recipes: build
	$(BUILD)/fashion_mnist /usr/share/datasets/fashion-mnist 5
	$(BUILD)/cifar10 ../shared/data/cifar-10 50 1 0 $(BUILD)/cifar10.h5
	@mkdir -p $(BUILD)/cifar_augmented
	$(BUILD)/mxu train models/cifar10_augmented.json \
	  --data ../shared/data/cifar-10 --rescale 1/255 --batch-size 32 \
	  --epochs 200 --early-stopping 5 \
	  --model-checkpoint '$(BUILD)/cifar_augmented/model.{epoch:02d}-{val_loss:.2f}.h5' \
	  --rotation-range 20 --width-shift-range 0.2 --height-shift-range 0.2 \
	  --horizontal-flip --report $(BUILD)/cifar_augmented/report.json

# Training throughput of the reference models (mxu bench), kept with the
# CPU model and the commit in bench/results/; then how cifar scales from 1
# to 2 threads, what another process on the cores costs (bench_busy.sh),
# keras.applications MobileNetV2, ResNet50, EfficientNetB0, MobileNetV3Small
# (Keras 3's file and tf.keras 2's, whose hard swish is ops) and
# EfficientNetV2B0 at 32x32, and the sequence models over Fashion-MNIST's
# rows (Conv1D; an LSTM and a GRU; a Transformer encoder). With
# MXU_PEERS_PYTHON set, PyTorch and TF-Keras train the same models as peers
# (bench/peers/run_peers.sh, ~15 minutes more), compared in the summary.
bench: build
	@mkdir -p bench/results
	$(BUILD)/mxu bench models/cifar10.json --batch-size 1024 --replicas 8 \
	  --threads 1 --report bench/results/cifar10_1thread.json
	$(BUILD)/mxu bench models/cifar10.json --batch-size 1024 --replicas 8 \
	  --threads 2 --report bench/results/cifar10_2threads.json
	$(BUILD)/mxu bench models/fashion_mnist.json --batch-size 1000 \
	  --threads 2 --report bench/results/fashion_mnist_2threads.json
	scripts/bench_busy.sh $(BUILD)/mxu bench/results
	$(BUILD)/mxu bench models/cifar10.json --batch-size 1024 --replicas 8 \
	  --threads 2 --precision mixed_bfloat16 \
	  --report bench/results/cifar10_bf16.json
	$(BUILD)/mxu bench models/cifar10_augmented.json --batch-size 32 \
	  --threads 2 --steps 100 --report bench/results/cifar10_augmented_plain.json
	$(BUILD)/mxu bench models/cifar10_augmented.json --batch-size 32 \
	  --threads 2 --steps 100 --augment \
	  --report bench/results/cifar10_augmented_augment.json
	$(BUILD)/mxu bench models/resnet20.json --batch-size 128 \
	  --threads 2 --report bench/results/resnet20_2threads.json
	$(BUILD)/mxu bench tests/keras_apps/MobileNetV2_32.k3.json \
	  --batch-size 128 --threads 2 \
	  --report bench/results/mobilenetv2_32_2threads.json
	$(BUILD)/mxu bench models/fashion_mnist.json --batch-size 1000 \
	  --threads 2 --precision mixed_bfloat16 \
	  --report bench/results/fashion_mnist_bf16.json
	$(BUILD)/mxu bench models/resnet20.json --batch-size 128 \
	  --threads 2 --precision mixed_bfloat16 \
	  --report bench/results/resnet20_bf16.json
	$(BUILD)/mxu bench tests/keras_apps/MobileNetV2_32.k3.json \
	  --batch-size 128 --threads 2 --precision mixed_bfloat16 \
	  --report bench/results/mobilenetv2_32_bf16.json
	$(BUILD)/mxu bench tests/keras_apps/ResNet50_32.k3.json \
	  --batch-size 64 --threads 2 \
	  --report bench/results/resnet50_32_2threads.json
	$(BUILD)/mxu bench tests/keras_apps/EfficientNetB0_32.k3.json \
	  --batch-size 64 --threads 2 \
	  --report bench/results/efficientnetb0_32_2threads.json
	$(BUILD)/mxu bench tests/keras_apps/MobileNetV3Small_32.k3.json \
	  --batch-size 128 --threads 2 \
	  --report bench/results/mobilenetv3small_32_2threads.json
	$(BUILD)/mxu bench tests/keras_apps/MobileNetV3Small_32.tf2.json \
	  --batch-size 128 --threads 2 \
	  --report bench/results/mobilenetv3small_32_tf2_2threads.json
	$(BUILD)/mxu bench tests/keras_apps/EfficientNetV2B0_32.k3.json \
	  --batch-size 64 --threads 2 \
	  --report bench/results/efficientnetv2b0_32_2threads.json
	$(BUILD)/mxu bench models/fashion_rows_conv1d.json --batch-size 128 \
	  --threads 2 --report bench/results/fashion_rows_conv1d_2threads.json
	$(BUILD)/mxu bench models/fashion_rows_rnn.json --batch-size 128 \
	  --threads 2 --report bench/results/fashion_rows_rnn_2threads.json
	$(BUILD)/mxu bench models/fashion_rows_transformer.json --batch-size 128 \
	  --threads 2 --report bench/results/fashion_rows_transformer_2threads.json
	-@bench/peers/run_peers.sh bench/results
	@python3 scripts/bench_summary.py bench/results

test-sanitize: deps
	@cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DMXU_SANITIZE=ON >/dev/null
	@cmake --build build-sanitize -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-sanitize --output-on-failure -j 2

# Every reader under libFuzzer with ASan and UBSan, FUZZ_SECONDS each
# (default 600), FUZZ_JOBS at a time: scripts/fuzz.sh.
fuzz:
	@scripts/deps.sh fuzz
	@scripts/fuzz.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-sanitize build-fuzz

# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · Escolha seu cache
#
# **Objetivo de aprendizagem.** Ao final deste notebook você saberá escolher um cache para um modelo e um comprimento
# de contexto com números, não com adjetivos: você terá medido de novo, nesta máquina, a tabela comparativa do guia do
# transformers, e saberá calcular o cache KV de um modelo de 7B–12B com 4k ou 32k tokens antes de baixá-lo.
#
# **Nas palavras do kvlab.** O guia ("Estratégias de cache") avalia três caches em quatro propriedades: camadas
# deslizantes, descarregamento (offloading), `torch.compile` e memória. Cada uma delas é uma afirmação que você pode
# testar. O kvlab troca cada célula por uma execução: um modelo de janela deslizante além da sua janela, uma execução
# com descarregamento que registra suas transferências, as assinaturas das entradas do forward ao longo dos passos de
# decodificação (uma assinatura = um grafo compilado) e o pico de bytes da mesma geração. A segunda metade dimensiona
# os caches de modelos grandes a partir dos dados de arquitetura das suas configs públicas (incluídos em
# `kvlab/data/architectures.json`), com as mesmas regras que batem, byte a byte, com os caches reais do kvlab.
#
# Gemma 3 270M (janela deslizante de 512) e SmolLM2-135M-Instruct, decodificação gulosa (greedy), CPU.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import platform
import warnings

import ipywidgets as widgets
import torch
import transformers

import kvlab
from kvlab.measure.devices import log_forward_inputs
from kvlab.live import live
from kvlab.measure import text
from kvlab.measure.guide_table import Setup, calculated_for, compare_with_guide, live_runs, measure
from kvlab.plots.cache_choice import plot_cache_choice
from kvlab.plots.kv_bytes import plot_bytes
from kvlab.size import architecture, cache_size

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
gemma, gemma_tokenizer = kvlab.load("gemma3")
model, tokenizer = kvlab.load("smollm2")
print(f"this machine: {platform.machine()}, {platform.python_version()}, torch {torch.__version__}, "
      f"{torch.get_num_threads()} threads, accelerator: {torch.cuda.is_available()}")

# %% [markdown]
# ## 1. Estratégias de cache
#
# A tabela do guia compara o `DynamicCache` padrão, o `StaticCache` e o `QuantizedCache`. No `generate`, a diferença
# entre eles é uma palavra-chave: nada para o padrão, `cache_implementation="static"` e
# `cache_implementation="quantized"` com um dict `cache_config` (aqui o backend quanto, 4 bits, um resíduo de 8 tokens
# em precisão total). O mesmo prompt de 48 tokens, 8 tokens novos em cada um:

# %%
prompt = text.prompt_ids(tokenizer, 48)  # (1, 48): the first 48 tokens of Python's reference prose
inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
quanto_4bit = {"backend": "quanto", "nbits": 4, "residual_length": 8, "q_group_size": 32}
out_dynamic = model.generate(**inputs, do_sample=False, max_new_tokens=8)  # the default: a DynamicCache
out_static = model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="static")
out_quantized = model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="quantized",
                               cache_config=quanto_4bit)
outputs = {"dynamic": out_dynamic, "static": out_static, "quantized": out_quantized}

# %% [markdown]
# As mesmas três chamadas dentro de `kvlab.watch`, que registra cada cache que `generate` criou, e a calculadora de
# tamanho do kvlab consultada para os mesmos tokens:

# %%
with kvlab.watch(model) as watch:
    watched_outputs = {
        "dynamic": model.generate(**inputs, do_sample=False, max_new_tokens=8),
        "static": model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="static"),
        "quantized": model.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="quantized",
                                    cache_config=quanto_4bit),
    }
watched = {kind: (trace, watched_outputs[kind]) for kind, trace in zip(watched_outputs, watch.traces)}

# %%
# NBVAL_CHECK_OUTPUT
smollm2 = architecture("smollm2")
for kind, (trace, out) in watched.items():
    size = calculated_for(trace, smollm2, prompt_tokens=48, cache_config=quanto_4bit if kind == "quantized" else None)
    print(f"{trace.meta['cache_class']:<14} holds {trace.summary()['final_bytes']:>9,} B for {size.tokens} tokens "
          f"(calculated {size.bytes:>9,} B); tokens as without watch: {torch.equal(out, outputs[kind])}; "
          f"as the dynamic cache: {torch.equal(outputs[kind], outputs['dynamic'])}")

# %% [markdown]
# O próprio `generate` dimensionou o cache estático para o prompt mais os tokens novos que vão voltar a entrar no
# modelo (55 posições), então aqui ele guarda exatamente o mesmo que o cache dinâmico. O cache quantizado de 4 bits é
# cerca de 3.4 vezes menor, e seus tokens gulosos já divergem dos outros em menos de 8 tokens. Essas três execuções
# formam a coluna de memória da tabela do guia; a próxima seção mede as quatro colunas.

# %% [markdown]
# ## 2. A tabela do guia, medida aqui
#
# **Preveja primeiro.** O guia diz: Dinâmico (deslizantes sim, offloading sim, compile não, memória média), Estático
# (sim, sim, sim, alta), Quantizado (não, não, não, baixa). Quais células você espera que uma medição derrube? Para a
# memória, o cache estático reserva 64 posições a mais do que a execução precisa (como se faz quando o comprimento
# final é desconhecido) e o cache quantizado usa o backend quanto com 4 bits e um resíduo de 8 tokens em precisão
# total.

# %%
setup = Setup(new_tokens=8, static_room=64)
rows = measure(gemma, model, tokenizer, prompt=text.prompt_ids(tokenizer, 48),
               sliding_prompt_ids=text.prompt_ids(gemma_tokenizer, 520), setup=setup)

# %%
# NBVAL_CHECK_OUTPUT
for row in rows:
    print(f"{row['cache']:<16} sliding: {row['sliding layers']:<3} offloading: {row['offloading']:<3} "
          f"torch.compile: {row['torch.compile']:<3} memory: {row['memory']}")
    for key in ("sliding evidence", "offloading evidence", "compile evidence"):
        print(f"{'':>18}{key}: {row[key]}")
    print(f"{'':>18}peak cache bytes (SmolLM2, 48 + {setup.new_tokens} tokens): {row['peak cache bytes']:,}")

# %%
# NBVAL_CHECK_OUTPUT
verdicts = compare_with_guide(rows)
print(f"{sum(v['agrees'] for v in verdicts)} of {len(verdicts)} cells agree with the guide")
for v in verdicts:
    if not v["agrees"]:
        print("differs:", v)

# %%
plot_bytes({row["cache"]: {"peak bytes": row["peak cache bytes"]} for row in rows},
           title=f"Peak cache bytes, SmolLM2, 48-token prompt + {setup.new_tokens} new tokens")

# %% [markdown]
# Nesta máquina a tabela se confirma, com três coisas que os adjetivos escondem:
#
# - "Suporta camadas deslizantes" significa que as camadas deslizantes ficam no tamanho da janela (511 ou 512
#   posições) enquanto as camadas completas guardam todos os tokens; o cache quantizado recusa o modelo logo de saída.
# - "Suporta offloading" é medido pelas transferências que uma execução com descarregamento registra. Aqui elas são
#   CPU→CPU (sem acelerador), então nada é economizado; em uma GPU, o mesmo cronograma mantém uma camada residente e
#   outra sendo pré-carregada.
# - A memória "alta" do cache estático é uma escolha: ela é o `max_cache_len` que você reservar. Reserve exatamente os
#   tokens de que precisa e ele empata com o cache dinâmico; o preço é pago quando o seu palpite é alto demais.
#
# A coluna de compilação é a contagem de assinaturas do forward do notebook 09: um cache estático dá uma assinatura
# para todos os 7 passos de decodificação, e o cache dinâmico, uma por passo (7 de 7). O cache quantizado também dá 7
# de 7, como o cache dinâmico: as chaves que um forward recebe são o seu resíduo em precisão total, que cresce um
# token por passo e ainda não tinha preenchido suas 8 posições. Em execuções mais longas, o resíduo é compactado a
# cada 8 tokens e recomeça, então seus formatos se repetem: o controle abaixo mede isso (8 assinaturas distintas em 23
# chamadas de decodificação com o seu padrão de 24 tokens novos).

# %% [markdown]
# ### Experimente: um cache, ao vivo, ao lado da calculadora
#
# Escolha um cache e um número de tokens novos: a figura executa a chamada `generate` do guia para esse cache sobre o
# prompt de 48 tokens dentro de `kvlab.watch` e de `log_forward_inputs`. À esquerda: os bytes que o cache real guarda
# no final (losango vermelho), sobre as barras que `kvlab.size` calcula para cada tipo com os mesmos tokens. À
# direita: o comprimento das chaves do cache que cada forward de decodificação recebeu (0 quando o resíduo quantizado
# está vazio) e o número de assinaturas de entrada distintas que um compilador baseado em tracing encontraria.
#
# As barras do estático são calculadas para um cache com exatamente os tokens guardados. `generate` nunca cria um
# cache estático menor do que o maior que já criou antes neste modelo (notebook 09, último controle); por isso, depois
# de uma execução estática mais longa, uma mais curta mostra seu losango acima da barra: o cache real manteve as
# posições extras.

# %%
KEYS = "cache.layers[0].keys"
# the guide's keywords for each cache, as in section 1
guide_calls = {"dynamic": {}, "static": {"cache_implementation": "static"},
               "quantized": {"cache_implementation": "quantized", "cache_config": quanto_4bit}}


def cache_choice(cache, new_tokens):
    with kvlab.watch(model) as run_watch, log_forward_inputs(model) as run_log:
        model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, **guide_calls[cache])
    trace = run_watch.trace
    held = 48 + new_tokens - 1
    calculated = {kind: cache_size(smollm2, kind, held, prefill=48, **options).bytes
                  for kind, options in {"dynamic": {}, "static": {"max_cache_len": held},
                                        "quantized": quanto_4bit}.items()}  # fmt: skip
    return plot_cache_choice(cache, trace.summary()["final_bytes"], calculated, run_log.lengths(KEYS),
                             run_log.decoding_signatures(), title=f"SmolLM2, 48-token prompt + {new_tokens} new tokens")  # fmt: skip


live(cache_choice,
     cache=widgets.Dropdown(options=list(guide_calls), value="quantized", description="cache"),
     new_tokens=widgets.IntSlider(value=24, min=4, max=40, step=4, continuous_update=False, description="new tokens"))

# %% [markdown]
# ## 3. Dimensionando o cache de modelos grandes antes de baixá-los
#
# **Preveja primeiro.** O Llama-2-7B tem 32 cabeças KV por camada; o Llama-3-8B tem 8 (grouped-query attention). Com
# 32k tokens em seus dtypes nativos de 16 bits, quantos GiB cada um ocupa? E o Gemma 3 12B, cujas 48 camadas são 40
# deslizantes (janela de 1024) e 8 completas?

# %%
MODELS = ["llama-2-7b", "llama-3-8b", "mistral-7b", "gemma-2-2b", "gemma-2-9b", "gemma-3-4b", "gemma-3-12b",
          "qwen3-4b", "phi-3-mini"]
sizes = {}
for name in MODELS:
    arch = architecture(name)
    # a prompt of `tokens - 1`, then one decoding step: the sliding layers are down to their window again
    sizes[name] = {f"{tokens // 1024}k tokens": cache_size(arch, "dynamic", tokens, prefill=tokens - 1, dtype=arch.dtype)
                   for tokens in (4096, 32768)}  # fmt: skip

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'model':<12} {'dtype':<9} {'layers (kinds)':<24} {'kv heads x dim':>14} {'4k tokens':>12} {'32k tokens':>12} "
      f"{'32k prefill peak':>17}")
for name in MODELS:
    arch, four, thirty_two = architecture(name), *sizes[name].values()
    kinds = ", ".join(f"{n} {k}" for k, n in arch.counts().items())
    print(f"{name:<12} {arch.dtype:<9} {kinds:<24} {f'{arch.kv_heads} x {arch.head_dim}':>14} "
          f"{four.bytes / 2**30:>8.3f} GiB {thirty_two.bytes / 2**30:>8.3f} GiB {thirty_two.peak_bytes / 2**30:>13.3f} GiB")

# %%
plot_bytes({name: {k: s.bytes for k, s in per.items()} for name, per in sizes.items()},
           title="DynamicCache after a prompt of 4k / 32k tokens (native dtype, batch 1)")

# %% [markdown]
# A grouped-query attention é a maior alavanca: o Llama-3-8B guarda um quarto do cache do Llama-2-7B em qualquer
# comprimento. As camadas deslizantes são a segunda: o arranjo 5:1 deslizantes:completas do Gemma 3 mantém a maioria
# das camadas em 1023 tokens, então seu cache só cresce com as poucas camadas completas. (As configs do Mistral-7B
# v0.1 e do Phi-3-mini tornam *todas* as camadas deslizantes.) Mas atenção à última coluna: um único pré-preenchimento
# longo primeiro monta as chaves e os valores do prompt inteiro em todas as camadas, deslizantes ou não, e só o passo
# de decodificação seguinte traz as camadas deslizantes de volta ao tamanho da janela. É esse pico transitório, e não
# o regime estável, que precisa caber na memória.

# %% [markdown]
# ## 4. A calculadora está certa? Conferida com os caches reais acima
#
# **Preveja primeiro.** A calculadora nunca executa um modelo. Para as execuções da seção 2 (Gemma 3 além da sua
# janela, SmolLM2 com três tipos de cache), ela vai concordar com os bytes que o kvlab contou nos caches reais:
# aproximadamente ou exatamente?

# %%
# NBVAL_CHECK_OUTPUT
for live in live_runs(rows):
    arch = architecture("gemma3" if live["model"] == "sliding model" else "smollm2")
    predicted = cache_size(arch, live["cache_kind"], live["tokens"], prefill=live["prefill"], **live["options"])
    print(f"{arch.name:<8} {live['cache_kind']:<10} {live['tokens']} tokens: live {live['final_bytes']:>11,} B, "
          f"calculated {predicted.bytes:>11,} B | peak live {live['peak_bytes']:>11,} B, calculated "
          f"{predicted.peak_bytes:>11,} B | exact: {(live['final_bytes'], live['peak_bytes']) == (predicted.bytes, predicted.peak_bytes)}")

# %% [markdown]
# Exatamente, byte a byte, incluindo a carga compactada do cache quantizado e o pico transitório do pré-preenchimento
# nas camadas deslizantes. É isso que permite confiar nos números dos modelos grandes acima: eles vêm das mesmas
# regras, aplicadas a dados lidos das configs públicas dos modelos. A mesma calculadora está na linha de comando:
# `kvlab size --model llama-3-8b --tokens 32768 --dtype bfloat16`.

# %% [markdown]
# ## Principais conclusões
#
# - DynamicCache: o padrão; lida com camadas deslizantes; um grafo compilado por passo; a memória acompanha os tokens.
# - StaticCache: uma única assinatura para toda a decodificação, por isso é o cache para `torch.compile`; custa
#   exatamente o que você reserva com `max_cache_len`.
# - QuantizedCache: o menor, só para modelos de atenção completa. As entradas do seu forward mudam de formato a cada
#   passo, como as do cache dinâmico (7 assinaturas em 7 passos na tabela); em execuções mais longas, o comprimento do
#   resíduo se repete com período `residual_length`, então a contagem para em `residual_length` (8 distintas em 23
#   chamadas de decodificação no controle).
# - O descarregamento tira camadas do acelerador ao custo de uma transferência por camada a cada passo; só economiza
#   memória onde há um acelerador.
# - Antes de escolher, calcule o tamanho: cabeças KV × head_dim × camadas × dtype × tokens, menos o que as janelas
#   deslizantes descartam, mais o pico transitório do pré-preenchimento. `kvlab.size` faz essa conta exatamente.
#
# **De volta ao início:** [00 · Comece aqui](00_start_here.ipynb), ou abra o Cache Explorer com `kvlab explore`.

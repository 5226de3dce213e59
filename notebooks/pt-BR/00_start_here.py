# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Comece aqui: o que um cache KV armazena e por que ele existe
#
# **Objetivo de aprendizagem.** Ao final deste notebook, você saberá desligar e ligar o cache em `generate` como faz o
# guia de cache, passar um `DynamicCache` criado por você, registrar o que ele guarda com `kvlab.watch`, calcular o
# tamanho dele a partir da configuração de um modelo e explicar por que gerar sem cache fica mais lento a cada token.
#
# **Nas palavras do kvlab.** Para prever o token *t*, um decoder faz atenção sobre os tokens *1…t−1*. Cada
# camada de atenção transforma cada token em uma *chave* (o que permite encontrá-lo) e um *valor* (o que
# ele entrega depois de encontrado). Uma vez calculados, eles nunca mudam, então um cache os guarda: por camada, chaves e
# valores de formato `(batch, kv_heads, tokens, head_dim)`. Com o cache, cada passo passa só **um** token novo pelo
# modelo e lê as chaves e os valores armazenados; sem ele, cada passo roda o modelo de novo sobre a sequência **inteira**.
#
# Tudo abaixo roda o SmolLM2-135M-Instruct (30 camadas, 3 cabeças KV × 64) na CPU, em float32, com decodificação greedy.
#
# ### O guia, seção por seção
#
# Estes notebooks seguem o guia "Estratégias de cache" (*Cache strategies*) do transformers. Nos notebooks em inglês, os
# títulos das seções do guia em pt-BR aparecem ao lado dos títulos em inglês; aqui, eles são os próprios títulos das
# seções, para que você possa ler o guia e os notebooks lado a lado.
#
# | seção do guia (pt-BR) | o que ensina | notebook |
# |---|---|---|
# | Estratégias de cache (a tabela) | qual cache escolher | [10 · escolha seu cache](10_choose_your_cache.ipynb) |
# | Cache padrão | `DynamicCache`, `use_cache=False`, um cache passado a `generate` | **00** (aqui), [01 · DynamicCache](01_dynamic_cache.ipynb) (camadas deslizantes e em blocos) |
# | Cache de tamanho fixo | `cache_implementation="static"`, `StaticCache`, compilação | [02 · StaticCache](02_static_cache.ipynb) |
# | Mantenha os tensores de geração na CPU | onde ficam os tensores de `generate` | [09 · onde ficam os tensores](09_where_tensors_live.ipynb) |
# | Cache offloading | `"offloaded"`, `"offloaded_static"`, `offloading=True`, `resilient_generate` | [03 · descarregamento (offloading)](03_offloading.ipynb) |
# | Cache quantizado | `cache_implementation="quantized"` com um `cache_config` | [04 · caches quantizados](04_quantized_caches.ipynb) |
# | Cache de encoder-decoder; Caches específicos de modelo | `EncoderDecoderCache`, estado do Mamba e de modelos híbridos | [05 · encoder-decoder e caches específicos de modelo](05_encoder_decoder_and_model_specific.ipynb) |
# | Geração iterativa | um só cache ao longo dos turnos de um chat | [06 · chat iterativo](06_iterative_chat.ipynb) |
# | Recortar um cache | `crop(-n)`, `activate_past_recording()` | [07 · recorte e reversão](07_crop_and_rollback.ipynb) |
# | Preencher um cache (cache de prefixo) | pré-preencher um prefixo uma vez, `copy.deepcopy` a cada pergunta | [08 · cache de prefixo](08_prefix_caching.ipynb) |
#
# O [11 · Explorador de Cache](11_cache_explorer.ipynb) reúne todos os tipos de cache sob um único conjunto de controles.
#
# ### Vocabulário: os termos do guia
#
# Os notebooks em inglês usam as palavras inglesas; o guia em pt-BR e estes notebooks usam as da tabela, uma palavra por
# conceito (`kvlab/i18n/terms_pt_BR.toml` as guarda, e um teste confere cada tradução com ele).
#
# | Inglês (notebooks em inglês) | pt-BR (o guia e estes notebooks) |
# |---|---|
# | KV cache; the default (dynamic) cache | cache KV; cache padrão, cache dinâmico |
# | fixed-size (static) cache | cache de tamanho fixo, cache estático |
# | key, value, layer, token | chave, valor, camada, token |
# | sliding window; chunked attention; linear attention | janela deslizante; atenção em blocos; atenção linear |
# | full attention; self-attention, cross-attention | atenção completa; autoatenção, atenção cruzada |
# | encoder, decoder; encoder-decoder cache | encoder, decoder; cache de encoder-decoder |
# | slot; allocated; live (slots, tokens); masked (allocated but unused) | posição; alocada; ocupada; mascarada (alocada, não usada) |
# | waste; evicted (dropped by a sliding window); storage (a tensor's memory) | desperdício; descartado; armazenamento |
# | step, decode step; forward (pass); prefill | passo, passo de decodificação; forward; pré-preenchimento |
# | greedy (decoding); full precision | greedy; precisão total |
# | offloading (moving layers to the CPU); prefetch | descarregamento (offloading); pré-carregamento |
# | quantization, quantized cache; packed; residual; flush | quantização, cache quantizado; empacotado; parte residual; flush |
# | crop, roll back; past recording | recortar (crop), reverter; registro do passado |
# | draft (speculative decoding) | rascunho |
# | prefix cache; deep copy; reuse | cache de prefixo; cópia profunda; reutilização |
# | iterative generation (chat); chat template | geração iterativa; chat template |
# | request; paged cache; block; continuous batching | requisição; cache paginado; bloco; batching contínuo |
# | the Cache Explorer | Explorador de Cache |
# | IQR = interquartile range (the middle half of repeated timings) | IQR = intervalo interquartil (a metade central das medições repetidas) |

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import os
import sys
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache

import kvlab
from kvlab.i18n import marks, number
from kvlab.live import live
from kvlab.measure import formula, latency, text, timing
from kvlab.plots import growth
from kvlab.plots import latency as latency_plots
from kvlab.plots.generate_time import plot_generate_time
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # encurta as execuções cronometradas na CI; as saídas verificadas valem de qualquer forma
NEW_TOKENS = 16 if QUICK else 64
REPEATS = 1 if QUICK else 3  # as execuções cronometradas são repetidas e intercaladas; os tempos são medianas com sua dispersão
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")  # SmolLM2-135M-Instruct, 30 camadas, float32, CPU
print(f"Python {sys.version.split()[0]}, transformers {transformers.__version__}, torch {torch.__version__}")

# %% [markdown]
# ## 1. Cache padrão
#
# `generate` usa um `DynamicCache`, a menos que você peça outro: ele começa vazio e cresce um token por camada a cada
# passo. O guia mostra duas chamadas: uma com o cache desligado (`use_cache=False`) e outra com um `DynamicCache` que
# você cria e entrega a `generate`.
#
# **Preveja primeiro.** Decodificação greedy, o mesmo prompt, 20 tokens novos: desligar o cache muda o texto?
# Defina `guess` como `True` (o texto muda) ou `False` (não muda) e depois rode as duas células seguintes.

# %%
guess = None  # use_cache=False muda o texto gerado? True ou False: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("The best thing about learning to cook is", return_tensors="pt")
no_cache = model.generate(**inputs, do_sample=False, max_new_tokens=20, use_cache=False)
default = model.generate(**inputs, do_sample=False, max_new_tokens=20)  # o padrão: um DynamicCache
texts_differ = not torch.equal(no_cache, default)
display(score(guess, texts_differ, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
print(repr(tokenizer.decode(default[0], skip_special_tokens=True)))
print("mesmos tokens com use_cache=False:", torch.equal(no_cache, default))

# %% [markdown]
# **Uma observação sobre o nome do argumento, feita uma vez para todos os notebooks.** O guia passa o cache como
# `generate(past_key_values=...)`. No transformers 5.25, a versão usada aqui, esse argumento se chama `cache=`: o
# `generate` traz `@deprecate_kwarg("past_key_values", "6.0.0", new_name="cache")` (`transformers/generation/utils.py`),
# que repassa `past_key_values=` como `cache=` com um aviso de descontinuação (silenciado na célula de imports) até a
# remoção na versão 6.0.0. Estes notebooks mantêm a forma do guia sempre que ela ainda funciona, para que você possa
# comparar cada célula com o código do guia.

# %%
# NBVAL_CHECK_OUTPUT
past_key_values = DynamicCache(config=model.config)
out = model.generate(**inputs, do_sample=False, max_new_tokens=20, past_key_values=past_key_values)
print("mesmos tokens que o padrão:", torch.equal(out, default))
print(f"{type(past_key_values).__name__}: {len(past_key_values.layers)} camadas, "
      f"{past_key_values.get_seq_length()} tokens em cache ({inputs.input_ids.shape[-1]} "
      "do prompt + 20 novos − 1: o último token novo nunca é realimentado)")
print("chaves da camada 0:", tuple(past_key_values.layers[0].keys.shape), "  (batch, kv_heads, tokens, head_dim)")

# %% [markdown]
# As mesmas três chamadas dentro de `kvlab.watch`: o código não muda, e cada cache que o modelo usou fica registrado.
# Uma execução com `use_cache=False` não registra nenhum.

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(model) as watch:
    past_key_values = DynamicCache(config=model.config)
    out = model.generate(**inputs, do_sample=False, max_new_tokens=20, past_key_values=past_key_values)
with kvlab.watch(model) as watch_default:
    model.generate(**inputs, do_sample=False, max_new_tokens=20)
with kvlab.watch(model) as watch_off:
    model.generate(**inputs, do_sample=False, max_new_tokens=4, use_cache=False)
summary = watch.trace.summary()
print("registrou o cache que passamos:", watch.caches[0] is past_key_values, "| classe:", watch.trace.meta["cache_class"])
print(f"passos {summary['steps']}, final {number(summary['final_bytes'])} bytes, posições ocupadas "
      f"{number(summary['slots_live'])} (30 camadas × {summary['slots_live'] // 30} tokens)")
print("o generate padrão criou:", watch_default.trace.meta["cache_class"],
      f"que guarda {number(watch_default.trace.summary()['final_bytes'])} bytes")
print("caches vistos com use_cache=False:", len(watch_off.traces))

# %% [markdown]
# O primeiro passo é o pré-preenchimento (o prompt de 8 tokens, todo de uma vez); depois vem um passo por token
# novo, menos o último: 20 passos. Cada passo de decodificação acrescenta um token a cada uma das 30 camadas, então
# as 30 camadas terminam com 8 + 19 = 27 tokens cada: as 810 posições ocupadas impressas acima.
#
# ## 2. O cache muda os tokens?
#
# Em aritmética exata, ler uma chave do cache ou recalculá-la dá o mesmo número. Em float32, a ordem das operações muda
# (uma consulta contra as chaves armazenadas, ou a sequência inteira de uma vez), então os logits podem diferir nos últimos
# bits, e uma decodificação greedy poderia trocar de token onde dois tokens estão quase empatados. Por isso verificamos
# em vez de supor: quatro prompts (a frase acima e os primeiros 16, 48 e 96 tokens do manual de referência do Python,
# tirados de `pydoc_data`), 12 tokens novos cada, `use_cache=False` contra o padrão.

# %%
prompts = {"frase de culinária": inputs.input_ids, **{f"manual, {n} tokens": text.prompt_ids(tokenizer, n)
                                                 for n in (16, 48, 96)}}  # fmt: skip
agreement = {}
for name, ids in prompts.items():
    runs = [model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                           min_new_tokens=12, use_cache=use_cache, return_dict_in_generate=True, output_logits=True)
            for use_cache in (False, True)]  # fmt: skip
    logit_gap = max((a - b).abs().max().item() for a, b in zip(runs[0].logits, runs[1].logits))
    top_two = min((lambda top: (top[0, 0] - top[0, 1]).item())(step.topk(2).values) for step in runs[1].logits)
    agreement[name] = (torch.equal(runs[0].sequences, runs[1].sequences), logit_gap, top_two)

# %%
# NBVAL_CHECK_OUTPUT
for name, (same, _, _) in agreement.items():
    print(f"{name:>17}: 12 tokens novos idênticos com e sem o cache: {same}")

# %%
# Não verificado: o tamanho das diferenças de arredondamento em float32 depende dos kernels da CPU.
for name, (_, gap, top_two) in agreement.items():
    print(f"{name:>17}: maior diferença de logit nos 12 passos {marks(f'{gap:.1e}')}; "
          f"menor distância entre os dois maiores logits {number(top_two, 3)}")

# %% [markdown]
# Nesses quatro prompts, em float32 com decodificação greedy nesta CPU, o cache não mudou um único token; os logits
# diferem apenas pelo arredondamento de float32 (a segunda saída impressa, na casa dos centésimos de milésimo), e, em
# todos os passos, a disputa mais apertada entre os dois tokens mais prováveis (o último número de cada linha, na casa
# dos centésimos) teve uma margem centenas de vezes maior que isso, então nenhum token esteve perto de trocar.
# Isso é evidência para estes quatro prompts, não uma garantia para outros: um prompt cujos dois maiores logits
# ficassem mais próximos que a diferença de arredondamento poderia trocar um token.
#
# ## 3. Tempo por token novo, com e sem cache
#
# Sem cache, o modelo relê a sequência inteira a cada token novo. Com cache, ele lê um token mais as chaves e os
# valores armazenados. À medida que a sequência cresce, como deve mudar o tempo *por token novo* em cada caso?
#
# **Preveja primeiro.** O trabalho pode ser contado antes de medir qualquer tempo. O prompt tem 16 tokens. No forward
# que produz o 5º token novo, quantos pares consulta-chave uma camada de atenção calcula sem cache (cada token da
# sequência até ali contra cada um), e quantos com o cache (o único token novo contra cada chave armazenada e contra
# si mesmo)? Defina os dois palpites e depois rode as células até a que avalia os palpites.

# %%
guess_no_cache = None  # pares consulta-chave por camada para o 5º token novo, use_cache=False: seu palpite
guess_cache = None  # o mesmo com o DynamicCache: seu palpite

# %% [markdown]
# `generate` informa apenas o tempo total; então, para medir o tempo de cada token separadamente,
# `latency.token_times` executa a mesma decodificação greedy como um loop simples de forwards: a sequência inteira a
# cada passo (sem cache) ou um token mais um `DynamicCache` (com cache). Ele repete os dois loops, alternando-os, e
# guarda a mediana do tempo de cada token com o seu intervalo interquartil (IQR: a metade central dos tempos
# repetidos); ao lado do tempo, conta exatamente o trabalho de cada forward.

# %%
prompt = text.prompt_ids(tokenizer, 16)  # (1, 16): os primeiros 16 tokens do texto de referência
runs = latency.token_times(model, prompt, NEW_TOKENS, repeats=REPEATS,
                           modes={"sem cache": False, "DynamicCache": True})  # sem cache, com cache, sem cache, ...
without_cache, with_cache = runs["sem cache"], runs["DynamicCache"]

# %%
# NBVAL_CHECK_OUTPUT
print("mesmos tokens no loop manual:", with_cache.token_ids == without_cache.token_ids)
print("sem cache: cada forward processa a sequência inteira até ali:", without_cache.tokens_run == without_cache.positions)
print("com o cache: tokens por forward depois do pré-preenchimento:", sorted(set(with_cache.tokens_run[1:])))
display(score(guess_no_cache, without_cache.pairs_scored[4], kind="count", label="pares consulta-chave, sem cache:"))
display(score(guess_cache, with_cache.pairs_scored[4], kind="count", label="pares consulta-chave, com cache:"))

# %%
# Tempos (não verificados: dependem da máquina). O tempo de cada token nas repetições; razões de medianas com
# seu intervalo de 95%. Um token tem só 3 leituras, então dez tokens vizinhos são agrupados: 30 leituras cada.
early, late = range(1, 11), range(NEW_TOKENS - 10, NEW_TOKENS)  # tokens 2-11 e os dez últimos
verdicts = {}  # {o que foi comparado: o veredito}, impresso aqui e desenhado sob a figura
for name, run in runs.items():
    first_ten = run.timing_over(early, label=f"trecho dos tokens {early.start + 1}-{early.stop}")
    last_ten = run.timing_over(late, label=f"trecho dos tokens {late.start + 1}-{late.stop}")
    print(f"{name:>12}: posições {run.positions[early.start]}-{run.positions[early.stop - 1]} {first_ten.describe()}; "
          f"posições {run.positions[late.start]}-{run.positions[late.stop - 1]} {last_ten.describe()}")
    verdicts[name] = timing.compare(first_ten, last_ten, warn=False).verdict()
totals = {name: timing.Timing(name, [sum(r) for r in run.runs]) for name, run in runs.items()}
verdicts["loop inteiro"] = timing.compare(totals["DynamicCache"], totals["sem cache"], warn=False).verdict()
for compared, verdict in verdicts.items():
    print(f"{compared}: {verdict}")

# %%
latency_plots.plot_token_times({"sem cache (use_cache=False)": without_cache, "DynamicCache": with_cache},
                               title=f"SmolLM2, {NEW_TOKENS} tokens novos depois de um prompt de 16 tokens", verdicts=verdicts)

# %% [markdown]
# O trabalho é exato (as linhas verificadas): sem cache, o forward do token na posição t passa todos os t tokens
# pelas 30 camadas e avalia t × t pares consulta-chave por camada; então o trabalho por token cresce com t, e o
# trabalho total, com o quadrado de t. Com o cache, cada forward depois do pré-preenchimento processa um token e avalia
# t pares. Os tempos são a saída acima da figura, desenhada de novo no quadro embaixo dela: os tokens 2-11 contra os
# dez últimos, em cada modo, como uma razão com o seu intervalo, e o loop inteiro. O trabalho prevê o que esperar: sem
# cache, os dez últimos forwards processam de 70 a 79 tokens em vez de 17 a 26, então devem levar claramente mais
# tempo; com o cache, cada forward processa um token e só a atenção sobre as chaves guardadas cresce (de 17-26 chaves
# para 70-79), então a diferença que a linha com cache mostrar deve ser bem menor que a da linha sem cache: compare as
# duas razões impressas. Um veredito "ruído demais para concluir" quer dizer que essas repetições não conseguiram
# decidir; rode a célula de novo numa máquina mais quieta.
#
# **Experimente.** Mova `tokens do prompt`: a célula executa as duas chamadas de `generate` do guia, `use_cache=False`
# e a padrão, depois dessa quantidade de tokens do texto de referência, 9 tokens novos cada, e acrescenta o ponto ao
# gráfico (16 e 128 são medidos antes de o controle desenhar pela primeira vez em 64; cada valor que você testar fica
# no gráfico). Um streamer que só anota quando chega cada token novo (`timing.DecodeClock`, passado como `streamer=`)
# divide cada chamada no pré-preenchimento, até o primeiro token novo, e nos 8 passos de decodificação depois dele.
# Cada ponto à esquerda é a mediana desses 8 passos, e a barra, o IQR deles. A linha de status embaixo do gráfico diz
# quanto tempo a mudança levou.
#
# Sem cache, cada um desses passos executa um forward sobre o prompt inteiro mais os tokens gerados até ali; então a
# linha de `use_cache=False` à esquerda deve subir com o prompt, enquanto cada passo da chamada padrão processa um token
# e a linha dela deve ficar quase nivelada (só a atenção sobre as chaves guardadas cresce). À direita, o
# pré-preenchimento é um forward sobre o prompt inteiro nas duas chamadas, então ali as duas linhas devem andar juntas
# (cada ponto ali é uma única medição, que uma máquina sobrecarregada pode deslocar): o cache não torna o prompt mais barato, e
# sim cada token depois dele. O quadro embaixo do gráfico compara, para cada chamada, os passos depois do prompt mais
# longo medido com os passos depois do mais curto: leia os vereditos ali, e não o formato de uma linha. Cada
# comprimento é uma única chamada de 8 passos, sem repetições intercaladas: se o veredito da chamada padrão disser *mais
# rápido* depois do prompt mais longo, que só acrescenta trabalho, é a máquina oscilando entre as duas chamadas, e
# não o cache.

# %%
decode_seconds = {"use_cache=False": {}, "padrão (DynamicCache)": {}}  # {tokens do prompt: Timing dos 8 passos}
first_token_seconds = {"use_cache=False": {}, "padrão (DynamicCache)": {}}  # {tokens do prompt: segundos}


def time_generate(prompt_tokens):
    ids = text.prompt_ids(tokenizer, prompt_tokens)  # (1, prompt_tokens)
    for label, options in {"use_cache=False": {"use_cache": False}, "padrão (DynamicCache)": {}}.items():
        clock = timing.DecodeClock()  # um streamer que só anota o instante em que cada token novo chega
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=9,
                       min_new_tokens=9, streamer=clock, **options)
        decode_seconds[label][prompt_tokens] = timing.Timing(label, clock.step_seconds)
        first_token_seconds[label][prompt_tokens] = clock.prefill_seconds
    return plot_generate_time(decode_seconds, first_token_seconds, current=prompt_tokens, max_tokens=256,
                              title=f"SmolLM2, prompt de {prompt_tokens} tokens (circulado), 9 tokens novos",
                              verdicts=latency.prompt_growth(decode_seconds))


for prompt_tokens in ([] if QUICK else (16, 128)):  # primeiro dois comprimentos: a primeira figura já tem um veredito
    time_generate(prompt_tokens)


live(time_generate, prompt_tokens=widgets.IntSlider(value=64, min=16, max=256, step=16, continuous_update=False,
                                                    description="tokens do prompt"))

# %% [markdown]
# ## 4. Quantos bytes custa cada token?
#
# **Preveja primeiro.** Cada token acrescenta, em cada uma das 30 camadas, uma chave e um valor de 3 cabeças × 64
# números, armazenados em float32 (4 bytes). Quantos bytes por token isso dá? Escreva seu palpite na próxima célula.

# %%
guess = None  # bytes por token: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
per_token = formula.kv_bytes_per_token(model.config, torch.float32)
display(score(guess, per_token, unit=" B", kind="amount"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"2 (K e V) × 30 camadas × 3 cabeças KV × 64 head_dim × 4 bytes = {number(per_token)} bytes por token")

# %% [markdown]
# Agora meça: um prompt de 128 tokens e 32 tokens novos passando pelo cache padrão de `generate`, dentro de `kvlab.watch`.

# %%
# NBVAL_CHECK_OUTPUT
long_prompt = text.prompt_ids(tokenizer, 128)  # (1, 128)
with kvlab.watch(model) as watch:
    model.generate(input_ids=long_prompt, attention_mask=torch.ones_like(long_prompt), do_sample=False,
                   max_new_tokens=32, min_new_tokens=32)
cache = watch.caches[-1]  # o DynamicCache que o generate criou (de novo um DynamicCache simples depois do bloco)
tokens = cache.get_seq_length()
print("chaves da camada 0:", tuple(cache.layers[0].keys.shape), cache.layers[0].keys.dtype)
print(f"tokens no cache: {tokens}  (128 + 32 − 1)")
measured, expected = watch.trace.summary()["final_bytes"], formula.kv_bytes(model.config, tokens)
print(f"medido: {number(measured)} bytes;  fórmula: {number(expected)} bytes")

# %% [markdown]
# Medição e fórmula coincidem byte a byte: um DynamicCache de camadas de atenção completa guarda exatamente as chaves e
# os valores de cada token que já viu, nada mais. O kvlab mede *alocações* (o armazenamento de cada tensor, contado uma vez);
# por isso, quando as duas divergirem nos próximos notebooks (janelas deslizantes, pré-alocação estática, quantização), a
# diferença é memória real, não contabilidade.

# %%
growth.plot_growth(watch.trace, formula_bytes_per_token=per_token,
                   title="DynamicCache do SmolLM2: bytes medidos comparados com a fórmula")

# %% [markdown]
# ## Principais conclusões
#
# - `generate` usa um `DynamicCache` por padrão; `use_cache=False` o desliga, e um
#   `DynamicCache(config=model.config)` criado por você pode ser passado (`past_key_values=`, que se chama `cache=` no
#   transformers 5.25). `kvlab.watch` registra qualquer um deles sem mudar o código.
# - Um cache KV guarda, para cada camada de atenção, as chaves e os valores de todos os tokens vistos até ali:
#   `2 × layers × kv_heads × head_dim × bytes` por token (46.080 B para o SmolLM2 em float32: 45 KiB).
# - Ele troca essa memória por tempo: depois do pré-preenchimento, um passo processa um token em vez da sequência
#   inteira, então o token da posição t calcula t pares consulta-chave em vez de t × t: o trabalho por token novo ainda
#   cresce com a posição, mas só pela atenção sobre as chaves guardadas, não por um forward sobre a sequência inteira.
#   Os vereditos da seção 3, impressos e desenhados embaixo das duas figuras dela, dizem o quanto o tempo acompanha o
#   trabalho na sua máquina.
# - Nos quatro prompts verificados aqui (float32, greedy, 12 tokens novos cada), ele não mudou um único token; os
#   logits diferiram apenas pelo arredondamento de float32.
#
# **A seguir:** [01 · DynamicCache](01_dynamic_cache.ipynb): como o cache cresce camada por camada e o que acontece no
# Gemma 3, cujas camadas de janela deslizante param de crescer em 512 tokens.

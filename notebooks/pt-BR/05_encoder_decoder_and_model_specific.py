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
# # 05 · Caches de encoder-decoder e específicos de modelo
#
# **Objetivo de aprendizagem.** Construir um `EncoderDecoderCache` a partir de dois caches e passá-lo para `generate`
# (a seção do guia sobre ele diz que ele gerencia um cache de autoatenção e um de atenção cruzada, cada um dos quais
# pode ser de outro tipo, e não mostra código para isso: as chamadas aqui são do kvlab, feitas com classes do
# transformers); distinguir as três formas que um cache pode ter: o cache de atenção cruzada de um encoder-decoder,
# fixo no comprimento da sequência de origem; o cache de autoatenção de um decoder, que cresce a cada token; e o
# estado de uma camada de espaço de estados (Mamba), constante qualquer que seja o comprimento. Reconhecê-las
# misturadas em um mesmo modelo híbrido (Jamba).
#
# **Nas palavras do kvlab.** Um encoder-decoder (BART, T5, Whisper) executa o encoder uma única vez sobre a sequência
# de origem. Cada camada do decoder faz atenção duas vezes: sobre os próprios tokens do decoder (*autoatenção*, que
# cresce como qualquer cache KV) e sobre a saída do encoder (*atenção cruzada*, cujas chaves e valores são calculados
# uma vez e nunca mudam). O `EncoderDecoderCache` do transformers recebe dois caches comuns, um para cada (primeiro o
# de autoatenção: a docstring dele em `transformers/cache_utils.py`, 5.25), e a seção 1 imprime o que cada metade
# guarda. Uma camada Mamba é de outra natureza: ela condensa todo o passado em um estado de tamanho fixo (uma janela
# curta de convolução e um estado recorrente) que sobrescreve a cada passo (`LinearAttentionLayer.update_conv_state`
# e `update_recurrent_state`, no mesmo arquivo, copiam o estado novo para dentro dos tensores antigos), e a seção 2
# imprime as formas desses estados.
#
# **Os modelos aqui têm pesos aleatórios** (`kvlab.tiny_model`, com semente fixa, vocabulário de 128): o texto deles
# é ruído. Eles têm as arquiteturas reais de BART, Llama, Mamba e Jamba em tamanho de brinquedo, e a lição é a
# *estrutura* do cache, não o texto. `min_new_tokens` impede que eles parem cedo num token de fim de sequência
# aleatório. O guia passa um cache como `past_key_values=`; o transformers 5.25 chama esse argumento de `cache=` e
# ainda aceita o nome antigo com um aviso de descontinuação, silenciado abaixo (`generate` traz
# `@deprecate_kwarg("past_key_values", ..., new_name="cache")` em `transformers/generation/utils.py`).

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache, EncoderDecoderCache, StaticCache

import kvlab
from kvlab.i18n import attention_role_label, layer_kind_label, number
from kvlab.live import live
from kvlab.plots import growth
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated.*")
torch.manual_seed(0)
transformers.logging.set_verbosity_error()  # as camadas Mamba minúsculas avisam que usam os kernels de referência


def random_prompt(n: int, seed: int = 0) -> torch.Tensor:
    """(1, n) token ids: the tiny models' input is noise anyway."""
    return torch.randint(3, 128, (1, n), generator=torch.Generator().manual_seed(seed))


# %% [markdown]
# ## 1. Cache de encoder-decoder
#
# tiny-bart: 2 camadas de decoder, 4 cabeças × 16. O cache é montado à mão, um `DynamicCache` para a autoatenção do
# decoder e outro para a atenção cruzada, e entregue a `generate`. Traduzimos uma sequência de origem de 12 tokens em
# 10 tokens.

# %%
# NBVAL_CHECK_OUTPUT
bart = kvlab.tiny_model("tiny-bart")
source = random_prompt(12)
past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
out = bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=10,
                    min_new_tokens=10, past_key_values=past_key_values)
print(out)
print(type(past_key_values).__name__, "depois de generate:")
print("  cache de autoatenção:    ", past_key_values.self_attention_cache.get_seq_length(), "tokens")
print("  cache de atenção cruzada:", past_key_values.cross_attention_cache.get_seq_length(), "tokens")

# %% [markdown]
# O cache de autoatenção guarda os tokens do decoder: o token inicial mais 9 tokens gerados e realimentados (o 10º
# token novo nunca é realimentado). O cache de atenção cruzada guarda as 12 posições da sequência de origem.
#
# Construir o cache à mão é opcional. Chamado sem cache, como o guia chama `generate`, o `bart.generate` vê
# que o modelo é um encoder-decoder e constrói ele mesmo o seu `EncoderDecoderCache`; com
# `return_dict_in_generate=True`, devolve esse cache em `past_key_values`, e podemos olhar dentro dele:

# %%
# NBVAL_CHECK_OUTPUT
generated = bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False,
                          max_new_tokens=10, min_new_tokens=10, return_dict_in_generate=True)
built = generated.past_key_values  # nenhum cache passado: este é do próprio generate
self_cache, cross_cache = built.self_attention_cache, built.cross_attention_cache


def bytes_held(cache):  # chaves e valores de todas as camadas
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


print(type(built).__name__, "construído pelo generate, com", type(self_cache).__name__, "e", type(cross_cache).__name__)
print(f"  cache de autoatenção:     {self_cache.get_seq_length()} tokens, chaves de uma camada "
      f"{tuple(self_cache.layers[0].keys.shape)}, {number(bytes_held(self_cache))} bytes nas suas 2 camadas")
print(f"  cache de atenção cruzada: {cross_cache.get_seq_length()} tokens, chaves de uma camada "
      f"{tuple(cross_cache.layers[0].keys.shape)}, {number(bytes_held(cross_cache))} bytes nas suas 2 camadas")
if torch.equal(generated.sequences, out):
    print("os mesmos tokens que com o cache construído à mão")
else:
    print("tokens diferentes dos gerados com o cache construído à mão")

# %% [markdown]
# Os mesmos dois `DynamicCache`, os mesmos 10 e 12 tokens, o mesmo texto. Construir o cache à mão serve para
# escolher o que vai em cada metade (a seção 1 termina com uma metade de autoatenção estática) ou para guardar o
# cache e continuar depois.
#
# **Preveja primeiro.** Agora a chamada da primeira célula, com o cache construído à mão, dentro de `kvlab.watch`,
# com uma sequência de origem de 12 tokens e depois com uma de 24. A origem de 12 tokens deu à atenção cruzada de
# cada camada do decoder 6.144 bytes (12 tokens × K e V × 4 cabeças × 16 × 4 bytes). Quantos bytes a atenção
# cruzada vai guardar no total, nas duas camadas, com a origem de 24 tokens?

# %%
guess = None  # bytes, atenção cruzada das duas camadas, fonte de 24 tokens: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
bart_traces = {}
for source_tokens in (12, 24):
    source = random_prompt(source_tokens)
    with kvlab.watch(bart) as watch:
        past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
        bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=10,
                      min_new_tokens=10, past_key_values=past_key_values)
    bart_traces[source_tokens] = watch.trace
    print(f"origem de {source_tokens} tokens ({watch.trace.meta['cache_class']}):")
    for row in watch.trace.layer_table():
        print(f"  {attention_role_label(row['role']):>5}, camada {row['layer_idx']}: "
              f"{row['logical_length']:>2} tokens, {number(row['bytes_held']):>6} bytes")
cross_bytes = sum(r["bytes_held"] for r in bart_traces[24].layer_table() if r["role"] == "cross")
display(score(guess, cross_bytes, unit=" B", kind="amount"))

# %% [markdown]
# O trace marca cada camada com o seu papel: `self` para os próprios tokens do decoder, `cross` para os do encoder.
# As linhas de autoatenção são iguais para as duas origens (10 tokens, 5.120 bytes por camada); as de atenção cruzada
# dobraram junto com a origem. Passo a passo, com uma geração mais longa:

# %%
source = random_prompt(24)
with kvlab.watch(bart) as watch:
    past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
    bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=24,
                  min_new_tokens=24, past_key_values=past_key_values)
growth.plot_growth(watch.trace,
                   title="tiny-bart (pesos aleatórios): bytes guardados pela autoatenção "
                         "e pela atenção cruzada vs tokens vistos pelo decoder")

# %% [markdown]
# A parte de autoatenção começa com um token (o token inicial do decoder) e cresce um por passo; a parte de atenção
# cruzada é preenchida uma única vez, no primeiro passo do decoder, com as chaves e valores do encoder para todos os
# 24 tokens de origem, e depois nunca muda. Para uma origem longa (um clipe de 30 segundos no Whisper tem 1.500 frames
# no encoder; fonte: Radford et al. 2022, o artigo do Whisper)
# a parte de atenção cruzada pode ser a maior parte do cache, e ela tem o mesmo tamanho no primeiro token e no último.
#
# As duas metades não precisam ser do mesmo tipo de cache. Aqui a metade de autoatenção é um `StaticCache`
# (pré-alocado com 32 posições), e a metade de atenção cruzada continua dinâmica:

# %%
# NBVAL_CHECK_OUTPUT
source = random_prompt(12)
with kvlab.watch(bart) as watch:
    past_key_values = EncoderDecoderCache(StaticCache(config=bart.config, max_cache_len=32),
                                          DynamicCache(config=bart.config))
    bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=10,
                  min_new_tokens=10, past_key_values=past_key_values)
for row in watch.trace.layer_table():
    print(f"{attention_role_label(row['role']):>5}, camada {row['layer_idx']}: {row['logical_length']:>2} "
          f"tokens ocupados em {row['slots_allocated']:>2} posições, {number(row['bytes_held']):>6} bytes")

# %% [markdown]
# Cada metade se comporta como a sua classe se comportaria sozinha: a metade estática aloca 32 posições desde o
# início (22 delas mascaradas), a metade dinâmica exatamente os 12 tokens de origem.
#
# **Ao vivo.** Mude o comprimento da origem e o número de tokens novos: a chamada `EncoderDecoderCache` da seção 1
# roda de novo sob `kvlab.watch` e o gráfico é redesenhado.

# %%
def self_vs_cross(source_tokens, new_tokens):
    source = random_prompt(source_tokens)
    with kvlab.watch(bart) as watch:
        past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
        bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False,
                      max_new_tokens=new_tokens, min_new_tokens=new_tokens, past_key_values=past_key_values)
    return growth.plot_growth(watch.trace, title=f"tiny-bart: origem de {source_tokens} "
                                                 f"tokens, {new_tokens} tokens novos")


live(self_vs_cross,
     source_tokens=widgets.IntSlider(value=24, min=4, max=128, step=4, continuous_update=False,
                                     description="tokens de origem"),
     new_tokens=widgets.IntSlider(value=24, min=4, max=96, step=4, continuous_update=False, description="tokens novos"))

# %% [markdown]
# ## 2. Caches específicos de modelo
#
# O guia diz que os modelos Mamba precisam de um cache próprio: eles não têm atenção, portanto não têm chaves nem
# valores. No transformers 5.25, a versão usada aqui, não existe uma classe de cache separada para o Mamba (não há
# `MambaCache` em lugar nenhum do código-fonte): `generate` constrói um `DynamicCache` comum cujas camadas são
# `LinearAttentionLayer`s, cada uma com um estado de convolução e um estado recorrente no lugar de chaves e valores
# (a tabela mais abaixo imprime a classe do cache que `generate` construiu para o tiny-mamba). O guia não mostra
# código para isso; aqui ele é montado à mão, como o notebook 00 monta um `DynamicCache` para um decoder
# (`DynamicCache(config=...)`), e entregue ao tiny-mamba (3 camadas Mamba):

# %%
# NBVAL_CHECK_OUTPUT
mamba = kvlab.tiny_model("tiny-mamba")
print("tipos de camada:", mamba.config.layer_types)
prompt = random_prompt(8)
past_key_values = DynamicCache(config=mamba.config)
mamba.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=16, min_new_tokens=16,
               past_key_values=past_key_values)
for idx, layer in enumerate(past_key_values.layers):
    conv, recurrent = layer.conv_states[0], layer.recurrent_states[0]
    print(f"camada {idx}: {type(layer).__name__}, estado de convolução "
          f"{tuple(conv.shape)}, estado recorrente {tuple(recurrent.shape)}")

# %% [markdown]
# O estado de convolução guarda as 4 últimas entradas de cada um dos 128 canais internos (`conv_kernel=4`), e o
# estado recorrente, 8 números por canal (`state_size=8`): nada em nenhuma das duas formas conta tokens. Até o
# transformers 5.24, um cache assim não conseguia nem dizer quantos tokens já tinha visto (`get_seq_length` levantava
# um `ValueError`: "can only be called on Attention layers"). A partir do 5.25, a versão usada aqui, cada
# `LinearAttentionLayer` guarda um contador próprio ao lado dos seus estados (`cumulative_length_linear`, um tensor
# de dimensão 0), e por isso responde: os 8 tokens do prompt e 15 dos 16 gerados (o último nunca volta ao modelo):

# %%
# NBVAL_CHECK_OUTPUT
past_key_values.get_seq_length()

# %% [markdown]
# A seguir: 64 tokens após um prompt de 8 tokens com o tiny-llama (3 camadas de atenção, 2 cabeças KV × 16,
# float32), o tiny-mamba (3 camadas Mamba) e o tiny-jamba (um híbrido que alterna camadas Mamba e camadas de
# atenção, seção 3).
#
# **Preveja primeiro.** Quantos bytes o cache do tiny-llama acrescenta por token gerado? Quantos bytes o cache do
# tiny-mamba guarda depois do prompt de 8 tokens (as formas dos seus estados estão impressas acima)? E quais camadas
# do tiny-jamba crescem com os tokens: as camadas de atenção ("completa"), as camadas Mamba ("linear"), "ambas" ou
# "nenhuma"? Responda a última com uma das quatro palavras entre aspas.

# %%
guess_llama = None  # bytes que o cache do tiny-llama acrescenta por token: seu palpite
guess_mamba = None  # bytes que o cache do tiny-mamba guarda depois do prompt: seu palpite
guess_jamba = None  # quais camadas do tiny-jamba crescem, uma das quatro palavras entre aspas da pergunta: seu palpite

# %%
TINY = {name: kvlab.tiny_model(name) for name in ("tiny-llama", "tiny-mamba", "tiny-jamba")}
traces = {}
for name, model in TINY.items():
    with kvlab.watch(model) as watch:
        model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=64,
                       min_new_tokens=64)
    traces[name] = watch.trace
    traces[name].meta["prompt_tokens"] = prompt.shape[-1]  # um cache Mamba não conta tokens: informe ao gráfico o eixo x

# %%
# NBVAL_CHECK_OUTPUT
per_token = {name: (t.bytes_by_step()[-1] - t.bytes_by_step()[0]) // (len(t.bytes_by_step()) - 1)
             for name, t in traces.items()}  # fmt: skip
display(score(guess_llama, per_token["tiny-llama"], unit=" B", kind="amount", label="tiny-llama:"))
display(score(guess_mamba, traces["tiny-mamba"].bytes_by_step()[0], unit=" B", kind="amount", label="tiny-mamba:"))

# %%
# NBVAL_CHECK_OUTPUT
for name, trace in traces.items():
    by_step = trace.bytes_by_step()
    kinds = sorted({layer_kind_label(row["layer_kind"], plural=True) for row in trace.layer_table()})  # em palavras
    print(f"{name:>10} ({trace.meta['cache_class']}, camadas {', '.join(kinds)}): {number(by_step[0]):>6} "
          f"bytes depois do prompt, {number(by_step[-1]):>6} depois de mais {len(by_step) - 1} tokens, "
          f"+{number((by_step[-1] - by_step[0]) // (len(by_step) - 1))} por token")

# %%
growth.plot_growth(traces, by_layer_kind=False, title="Modelos minúsculos de pesos aleatórios: "
                                                      "cache KV vs estado do Mamba vs híbrido")

# %% [markdown]
# O tiny-llama cresce 768 bytes por token (3 camadas × K e V × 2 cabeças × 16 × 4 bytes), a cada passo da execução. O
# estado do tiny-mamba tem os mesmos 18.432 bytes depois de 8 tokens e depois de 71: cada uma das suas 3 camadas
# guarda 128 canais × (4 + 8) números float32, 6.144 bytes, sobrescritos no lugar. O estado do Mamba minúsculo é maior
# que o cache KV do Llama minúsculo até 24 tokens (18.432 / 768); daí em diante, o estado constante é o menor, e a
# diferença aumenta 768 bytes a cada token.
#
# **Ao vivo.** Mude o número de tokens novos: a linha do tiny-llama cruza a linha plana do tiny-mamba em 24 tokens
# vistos (8 + 16: escolha 20 tokens novos ou mais para chegar lá), e a distância entre elas depois disso aumenta 768
# bytes por token.

# %%
def mamba_vs_llama(new_tokens):
    seen = {}
    for name in ("tiny-llama", "tiny-mamba"):
        with kvlab.watch(TINY[name]) as watch:
            TINY[name].generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        seen[name] = watch.trace
        seen[name].meta["prompt_tokens"] = prompt.shape[-1]  # para o eixo x do estado Mamba (ele não conta tokens)
    return growth.plot_growth(seen, by_layer_kind=False, title=f"prompt de 8 tokens + {new_tokens} tokens novos")


live(mamba_vs_llama,
     new_tokens=widgets.IntSlider(value=32, min=4, max=128, step=4, continuous_update=False, description="tokens novos"))

# %% [markdown]
# ## 3. Um híbrido: Jamba
#
# O tiny-jamba alterna camadas Mamba e camadas de atenção; o transformers lhe dá um único `DynamicCache`, com uma
# `LinearAttentionLayer` onde o modelo tem uma camada Mamba e uma `DynamicLayer` onde ele tem atenção. O seu terceiro
# palpite da seção 2, quais das suas camadas crescem, é pontuado aqui:

# %%
# NBVAL_CHECK_OUTPUT
jamba_kinds = growth.bytes_by_layer_kind(traces["tiny-jamba"])  # {tipo: [(tokens vistos, bytes), ...]}
grown = [layer_kind_label(kind) for kind, points in jamba_kinds.items() if points[-1][1] > points[0][1]]
answers = dict(both_label="ambas", neither_label="nenhuma")  # as palavras da pergunta, no idioma do leitor
display(score(guess_jamba, grown[0] if len(grown) == 1 else answers["both_label" if grown else "neither_label"],
              kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
print("tipos de camada:", TINY["tiny-jamba"].config.layer_types)
for row in traces["tiny-jamba"].layer_table():
    print(f"camada {row['layer_idx']} {layer_kind_label(row['layer_kind']):>8}: "
          f"{row['logical_length']:>2} tokens, {number(row['bytes_held']):>6} bytes")
for kind, points in jamba_kinds.items():
    print(f"camadas {layer_kind_label(kind, plural=True)}: {number(points[0][1]):>6} "
          f"bytes depois do prompt, {number(points[-1][1]):>6} no fim")

# %%
growth.plot_growth(traces["tiny-jamba"], title="tiny-jamba (pesos aleatórios): estado linear vs KV da atenção")

# %% [markdown]
# Só as camadas de atenção crescem; o estado das camadas Mamba fica constante. A inclinação da curva de memória de um
# híbrido é definida apenas pelas suas camadas de atenção: as 2 camadas de atenção do tiny-jamba acrescentam 512 bytes
# por token, contra 768 das 3 do tiny-llama.
#
# ## Principais conclusões
#
# - `EncoderDecoderCache(self_cache, cross_cache)` envolve dois caches comuns: um cache de autoatenção, que cresce a
#   cada token gerado, e um cache de atenção cruzada, fixo no comprimento da origem e preenchido uma única vez. Os
#   dois podem ser de tipos diferentes (estático e dinâmico, acima).
# - A partir do transformers 5.24, o "cache específico de modelo" do Mamba é um `DynamicCache` de
#   `LinearAttentionLayer`s: um estado de tamanho constante por camada (a partir do 5.25, com um contador de tokens ao
#   lado), sem tokens armazenados. Um cache KV cresce linearmente; os híbridos crescem só nas suas camadas de atenção.
# - `kvlab.watch` registra as três formas a partir de código do transformers sem alterações, no mesmo formato de
#   trace.
#
# **A seguir:** [06 · Chat iterativo](06_iterative_chat.ipynb): reutilize um único cache ao longo dos turnos de uma
# conversa.
